package bench

import (
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// machineSample is the CPU time used on the whole machine and by this
// process, read at the start and at the end of a run, so that a report can
// say how much other processes competed for the CPUs. (The disk is shared
// too, but its counters mix other processes' writes with this process's
// own journal commits, so they cannot tell them apart.)
type machineSample struct {
	at        time.Time
	busyTicks uint64 // all CPUs, every process (/proc/stat), in clockTicks
	ownCPU    time.Duration
	ok        bool
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

func sampleMachine() machineSample {
	s := machineSample{at: time.Now()}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return s
	}
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]:
	// everything but idle and iowait; guest time is already in user.
	for i, v := range f[1:9] {
		if i == 3 || i == 4 {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return s
		}
		s.busyTicks += n
	}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return s
	}
	s.ownCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s.ok = true
	return s
}

// othersCPU returns the share of all cpus (percent) that other processes
// used between a and b, or -1 if unknown.
func othersCPU(a, b machineSample, cpus int) float64 {
	wall := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || wall <= 0 {
		return -1
	}
	busy := float64(b.busyTicks-a.busyTicks) / clockTicks
	own := (b.ownCPU - a.ownCPU).Seconds()
	return max(busy-own, 0) / (wall * float64(cpus)) * 100
}
