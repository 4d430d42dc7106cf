#!/usr/bin/python3
"""A stand-in for systemd-logind on a private D-Bus bus (tests/integration/nodeshutdown.rs).

It owns org.freedesktop.login1 and org.freedesktop.systemd1 and implements what nanolet's
node shutdown manager uses, with logind's names and signatures:
- org.freedesktop.login1.Manager.Inhibit(ssss) -> h: a delay lock is the write end of a pipe;
  the lock is released when every copy of it is closed (the read end hangs up), as logind
  watches its FIFO;
- org.freedesktop.DBus.Properties.Get("org.freedesktop.login1.Manager",
  "InhibitDelayMaxUSec") -> v(t);
- org.freedesktop.systemd1.Manager.KillUnit("systemd-logind.service", "all", 1): logind's
  SIGHUP, which re-reads InhibitDelayMaxSec from the drop-in directory;
- the signal org.freedesktop.login1.Manager.PrepareForShutdown(b), sent when the test calls
  org.nanolet.Test.Shutdown(b) (the real logind sends it when a shutdown is scheduled).

Every event is a line "<seconds since boot> <event> <args...>" in the log file; "ready" once the names
are owned.

usage: logind_standin.py BUS_ADDRESS DROP_IN_DIR INITIAL_DELAY_USEC LOG_FILE
"""
import os
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

ADDRESS, CONF_DIR, DELAY_USEC, LOG = sys.argv[1:5]
MANAGER = "org.freedesktop.login1.Manager"
log = open(LOG, "a", buffering=1)


def say(*words):
    # CLOCK_BOOTTIME: the clock of /proc/uptime, which the test pods' hooks read.
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    log.write("%.3f %s\n" % (now, " ".join(str(w) for w in words)))


dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(ADDRESS)


class Logind(dbus.service.Object):
    def __init__(self):
        super().__init__(bus, "/org/freedesktop/login1")
        self.delay_usec = int(DELAY_USEC)

    @dbus.service.method(MANAGER, in_signature="ssss", out_signature="h")
    def Inhibit(self, what, who, why, mode):
        r, w = os.pipe()
        say("inhibit", what, who, mode, why.replace(" ", "_"))
        GLib.io_add_watch(r, GLib.IO_HUP | GLib.IO_ERR, self.released, str(who))
        lock = dbus.types.UnixFd(w)  # holds its own duplicate
        os.close(w)
        return lock

    def released(self, fd, _condition, who):
        say("released", who)
        os.close(fd)
        return False

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        if interface == MANAGER and name == "InhibitDelayMaxUSec":
            return dbus.UInt64(self.delay_usec, variant_level=1)
        raise dbus.exceptions.DBusException(
            "unknown property %s.%s" % (interface, name),
            name="org.freedesktop.DBus.Error.UnknownProperty",
        )

    @dbus.service.signal(MANAGER, signature="b")
    def PrepareForShutdown(self, active):
        say("PrepareForShutdown", bool(active))

    @dbus.service.method("org.nanolet.Test", in_signature="b", out_signature="")
    def Shutdown(self, active):
        self.PrepareForShutdown(active)

    def reload(self):
        """logind.conf.d: the last InhibitDelayMaxSec of the *.conf files, in name order."""
        if not os.path.isdir(CONF_DIR):
            return
        for name in sorted(os.listdir(CONF_DIR)):
            if not name.endswith(".conf"):
                continue
            with open(os.path.join(CONF_DIR, name)) as f:
                for line in f:
                    key, _, value = line.strip().partition("=")
                    if key == "InhibitDelayMaxSec":
                        self.delay_usec = int(value) * 1000000
        say("reloaded", self.delay_usec)


class Systemd(dbus.service.Object):
    def __init__(self, logind):
        super().__init__(bus, "/org/freedesktop/systemd1")
        self.logind = logind

    @dbus.service.method("org.freedesktop.systemd1.Manager", in_signature="ssi", out_signature="")
    def KillUnit(self, unit, who, signal):
        say("KillUnit", unit, who, signal)
        if unit == "systemd-logind.service" and signal == 1:
            self.logind.reload()


logind = Logind()
systemd = Systemd(logind)
names = [dbus.service.BusName(n, bus) for n in ("org.freedesktop.login1", "org.freedesktop.systemd1")]
say("ready")
GLib.MainLoop().run()
