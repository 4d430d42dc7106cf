#!/usr/bin/python3
"""A stand-in for systemd's manager (PID 1) on a private D-Bus bus, for the real systemd-logind
(tests/integration/nodeshutdown.rs, the real-logind test).

The real logind asks systemd, over org.freedesktop.systemd1, for what only PID 1 does; this
machine runs no systemd as PID 1, so this stand-in answers in its place:
- Subscribe() (logind subscribes to job and unit signals at start);
- the LoadState of poweroff.target/reboot.target (logind checks the target exists before it
  announces a shutdown): "loaded";
- StartUnit(ss) -> o: the shutdown itself, after logind has waited for the delay inhibitors.
  Recorded, answered with a job path, and a JobRemoved(uoss) "done" signal follows, as systemd
  sends when the job ends. Nothing is powered off.

Every event is a line "<seconds since boot> <event> <args...>" in the log file; "ready" once
the name is owned.

usage: systemd_standin.py BUS_ADDRESS LOG_FILE
"""
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

ADDRESS, LOG = sys.argv[1:3]
MANAGER = "org.freedesktop.systemd1.Manager"
log = open(LOG, "a", buffering=1)


def say(*words):
    # CLOCK_BOOTTIME: the clock of /proc/uptime, which the test pods' hooks read.
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    log.write("%.3f %s\n" % (now, " ".join(str(w) for w in words)))


dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(ADDRESS)


class Unit(dbus.service.Object):
    """/org/freedesktop/systemd1/unit/<escaped name>: only its LoadState."""

    def __init__(self, name):
        escaped = name.replace(".", "_2e").replace("-", "_2d")
        super().__init__(bus, "/org/freedesktop/systemd1/unit/" + escaped)
        self.name = name

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, interface, prop):
        say("Get", self.name, prop)
        if interface == "org.freedesktop.systemd1.Unit" and prop == "LoadState":
            return dbus.String("loaded", variant_level=1)
        raise dbus.exceptions.DBusException(
            "unknown property %s.%s" % (interface, prop),
            name="org.freedesktop.DBus.Error.UnknownProperty",
        )


class Systemd(dbus.service.Object):
    def __init__(self):
        super().__init__(bus, "/org/freedesktop/systemd1")
        self.jobs = 0

    @dbus.service.method(MANAGER, in_signature="", out_signature="")
    def Subscribe(self):
        say("Subscribe")

    @dbus.service.method(MANAGER, in_signature="ss", out_signature="o")
    def StartUnit(self, unit, mode):
        self.jobs += 1
        job = "/org/freedesktop/systemd1/job/%d" % self.jobs
        say("StartUnit", unit, mode)
        GLib.timeout_add(100, self.done, self.jobs, job, unit)
        return dbus.ObjectPath(job)

    def done(self, id_, job, unit):
        self.JobRemoved(dbus.UInt32(id_), dbus.ObjectPath(job), unit, "done")
        return False

    @dbus.service.signal(MANAGER, signature="uoss")
    def JobRemoved(self, id_, job, unit, result):
        say("JobRemoved", unit, result)


systemd = Systemd()
units = [Unit(n) for n in ("poweroff.target", "reboot.target", "halt.target")]
name = dbus.service.BusName("org.freedesktop.systemd1", bus)
say("ready")
GLib.MainLoop().run()
