// nanolet-test-device-plugin: a device plugin for nanolet's tests, made of the Kubernetes
// project's own device plugin server (k8s.io/kubernetes pkg/kubelet/cm/devicemanager/plugin/
// v1beta1, the stub the kubelet's e2e tests use) with the two things the sample plugin lacks:
// device nodes (Allocate answers a DeviceSpec per device, as serial and GPU plugins do) and
// health changes (ListAndWatch sends the devices again with the ones named unhealthy).
//
// scripts/upstream builds it inside the pinned k8s.io/kubernetes source (pin
// `test-device-plugin`, package `local:tests/peers/device-plugin`), so the stub, gRPC and the
// API types are upstream's at that version. Only this file is ours.
//
// Environment:
//
//	KUBELET_SOCKET   the kubelet's registration socket (nanolet's <device-plugin-dir>/kubelet.sock)
//	RESOURCE_NAME    the extended resource (e.g. nanolet.test/serial)
//	DEVICES          id=/host/device/node,... (each reaches the container at /dev/<id>)
//	HEALTH_FILE      on SIGUSR1 the file is read: one unhealthy device id per line; the
//	                 devices are sent again with those Unhealthy, the others Healthy
//
// The plugin's socket is <dir of KUBELET_SOCKET>/nanolet-test-<pid>.sock; it asks for
// PreStartContainer and offers GetPreferredAllocation (the highest ids first), and registers
// again when the kubelet's socket is made anew (the stub's Watch).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

func main() {
	ctx := context.Background()
	logger := klog.FromContext(ctx)
	kubelet := os.Getenv("KUBELET_SOCKET")
	resource := os.Getenv("RESOURCE_NAME")
	healthFile := os.Getenv("HEALTH_FILE")
	nodes := map[string]string{}
	var devs []*pluginapi.Device
	for _, item := range strings.Split(os.Getenv("DEVICES"), ",") {
		id, node, ok := strings.Cut(item, "=")
		if !ok || id == "" || node == "" {
			fmt.Fprintf(os.Stderr, "DEVICES: %q is not id=/host/path\n", item)
			os.Exit(2)
		}
		nodes[id] = node
		devs = append(devs, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if kubelet == "" || resource == "" {
		fmt.Fprintln(os.Stderr, "KUBELET_SOCKET and RESOURCE_NAME are required")
		os.Exit(2)
	}
	dir := filepath.Dir(kubelet)
	socket := filepath.Join(dir, fmt.Sprintf("nanolet-test-%d.sock", os.Getpid()))

	stub := plugin.NewDevicePluginStub(logger, devs, socket, resource, true, true)
	stub.SetAllocFunc(func(r *pluginapi.AllocateRequest, known map[string]*pluginapi.Device) (*pluginapi.AllocateResponse, error) {
		var out pluginapi.AllocateResponse
		for _, req := range r.ContainerRequests {
			resp := &pluginapi.ContainerAllocateResponse{
				Envs:        map[string]string{"NANOLET_TEST_DEVICES": strings.Join(req.DevicesIds, ",")},
				Annotations: map[string]string{"nanolet.test/devices": strings.Join(req.DevicesIds, ",")},
			}
			for _, id := range req.DevicesIds {
				if _, ok := known[id]; !ok {
					return nil, fmt.Errorf("allocation of unknown device %s", id)
				}
				resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{
					ContainerPath: "/dev/" + id,
					HostPath:      nodes[id],
					Permissions:   "rw",
				})
			}
			out.ContainerResponses = append(out.ContainerResponses, resp)
		}
		return &out, nil
	})
	stub.SetGetPreferredAllocFunc(func(r *pluginapi.PreferredAllocationRequest, _ map[string]*pluginapi.Device) (*pluginapi.PreferredAllocationResponse, error) {
		var out pluginapi.PreferredAllocationResponse
		for _, req := range r.ContainerRequests {
			ids := append([]string{}, req.MustIncludeDeviceIDs...)
			rest := append([]string{}, req.AvailableDeviceIDs...)
			sort.Sort(sort.Reverse(sort.StringSlice(rest)))
			for _, id := range rest {
				if len(ids) >= int(req.AllocationSize) {
					break
				}
				if !contains(ids, id) {
					ids = append(ids, id)
				}
			}
			out.ContainerResponses = append(out.ContainerResponses,
				&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
		}
		return &out, nil
	})
	if err := stub.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "starting the plugin server on %s: %v\n", socket, err)
		os.Exit(1)
	}
	if err := stub.Register(ctx, kubelet, resource, dir); err != nil {
		fmt.Fprintf(os.Stderr, "registering at %s: %v\n", kubelet, err)
		os.Exit(1)
	}
	go stub.Watch(ctx, kubelet, resource, dir)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		if sig != syscall.SIGUSR1 {
			_ = stub.Stop(logger)
			os.Exit(0)
		}
		unhealthy := map[string]bool{}
		if data, err := os.ReadFile(healthFile); err == nil {
			for _, l := range strings.Split(string(data), "\n") {
				if l = strings.TrimSpace(l); l != "" {
					unhealthy[l] = true
				}
			}
		}
		var now []*pluginapi.Device
		for _, d := range devs {
			h := pluginapi.Healthy
			if unhealthy[d.ID] {
				h = pluginapi.Unhealthy
			}
			now = append(now, &pluginapi.Device{ID: d.ID, Health: h})
		}
		logger.Info("Health update", "unhealthy", unhealthy)
		// Update blocks until a ListAndWatch stream takes it: not from the signal loop's
		// only goroutine, so a second signal is still seen.
		go stub.Update(now)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
