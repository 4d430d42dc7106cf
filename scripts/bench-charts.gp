# Charts of the footprint benchmark (issue 8): `gnuplot -e "dir='results'" scripts/bench-charts.gp`
# reads the results/bench-*.dat files benches/footprint.rs writes and draws results/bench-*.png.
# scripts/bench runs it after the benchmark when gnuplot is installed (scripts/install-deps.sh).
if (!exists("dir")) dir = 'results'
set terminal pngcairo size 720,420 noenhanced font ",10"
set grid ytics
set key top left

f = dir.'/bench-start.dat'
if (system('test -s '.f.' && echo 1') eq "1") {
  set output dir.'/bench-start.png'
  set title 'Pod start: manifest written -> container Running (p50, p95), ms'
  set style data histograms
  set style histogram clustered gap 1
  set style fill solid 0.8 border -1
  set yrange [0:*]
  set ylabel 'ms'
  plot f using 2:xtic(1) title 'nanolet p50', '' using 3 title 'nanolet p95', \
       '' using 4 title 'raw CRI floor p50', '' using 5 title 'raw CRI floor p95'
}

f = dir.'/bench-footprint.dat'
if (system('test -s '.f.' && echo 1') eq "1") {
  set output dir.'/bench-rss.png'
  set title 'nanolet memory vs running pods (median, min-max of 3 samples), MiB'
  set xlabel 'running pods'
  set ylabel 'MiB'
  set yrange [0:*]
  set xrange [-5:*]
  plot f using 1:2:3:4 with yerrorlines title 'VmRSS', \
       '' using 1:5 with linespoints title 'PSS', \
       8 with lines dashtype 2 title 'budget 8 MiB'
  set output dir.'/bench-cpu.png'
  set title 'nanolet CPU vs running pods, no probes (schedstat; median, min-max), % of one core'
  set ylabel '% of one core'
  plot f using 1:6:7:8 with yerrorlines title 'CPU', \
       0.1 with lines dashtype 2 title 'budget 0.1 %'
}

f = dir.'/bench-cold.dat'
if (system('test -s '.f.' && echo 1') eq "1") {
  set output dir.'/bench-cold.png'
  set title 'Cold start: k pods written at once -> all Running, s'
  set xlabel 'pods'
  set ylabel 's'
  set yrange [0:*]
  set xrange [0:*]
  peer = dir.'/bench-cold-podman.dat'
  if (system('test -s '.peer.' && echo 1') eq "1") {
    plot f using 1:2 with linespoints title 'nanolet', peer using 1:2 with linespoints title 'podman kube play'
  } else {
    plot f using 1:2 with linespoints title 'nanolet'
  }
}

f = dir.'/bench-kubelet.dat'
if (system('test -s '.f.' && echo 1') eq "1") {
  set output dir.'/bench-kubelet.png'
  set title 'nanolet / the real kubelet, same containerd and manifests (below 1: nanolet less)'
  set style data histograms
  set style histogram clustered gap 1
  set style fill solid 0.8 border -1
  unset xlabel
  set xrange [*:*]
  set logscale y
  set yrange [0.01:10]
  set ylabel 'nanolet / kubelet (log scale)'
  plot f using 4:xtic(1) title 'nanolet / kubelet', 1 with lines dashtype 2 title 'the kubelet'
  unset logscale y
}
