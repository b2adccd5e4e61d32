package waits

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Event names one kind of wait. The zero Event is not an event.
type Event uint8

// MaxEvents bounds the number of events, built-in and Defined.
const MaxEvents = 48

// The built-in events (see the package doc for what each one times).
const (
	LogFileSync Event = iota + 1
	LogFileParallelWrite
	LogFileFdatasync
	LogSpaceThrottle
	StandbySyncAck
	StandbyLogWrite
	RMRoundtrip
	RMPrepare
	RMCommit
	RMRollback
	RMCommitPrepared
	RMRollbackPrepared
	RMRecoverScan
	CoordinatorCommit
	CoordinatorAbort
	CoordinatorStatus
	lastBuiltin = CoordinatorStatus
)

var (
	defineMu sync.Mutex
	names    [MaxEvents]string
	nEvents  atomic.Uint32 // events defined so far, counting the zero Event
)

func init() {
	for e, n := range map[Event]string{
		LogFileSync:          "log file sync",
		LogFileParallelWrite: "log file parallel write",
		LogFileFdatasync:     "log file fdatasync",
		LogSpaceThrottle:     "log space throttle",
		StandbySyncAck:       "standby sync ack",
		StandbyLogWrite:      "standby log write",
		RMRoundtrip:          "rm roundtrip",
		RMPrepare:            "rm prepare",
		RMCommit:             "rm commit",
		RMRollback:           "rm rollback",
		RMCommitPrepared:     "rm commit prepared",
		RMRollbackPrepared:   "rm rollback prepared",
		RMRecoverScan:        "rm recover scan",
		CoordinatorCommit:    "coordinator commit",
		CoordinatorAbort:     "coordinator abort",
		CoordinatorStatus:    "coordinator status",
	} {
		names[e] = n
	}
	nEvents.Store(uint32(lastBuiltin) + 1)
}

// Define returns the event of that name, adding it if it is new. Call it at
// init time (a package-level var): an event defined later is missing from
// snapshots taken before. It panics past MaxEvents events or on an empty
// name, both programming errors.
func Define(name string) Event {
	if name == "" {
		panic("waits: Define with an empty name")
	}
	defineMu.Lock()
	defer defineMu.Unlock()
	n := Event(nEvents.Load())
	for e := Event(1); e < n; e++ {
		if names[e] == name {
			return e
		}
	}
	if int(n) >= MaxEvents {
		panic(fmt.Sprintf("waits: more than %d events (defining %q)", MaxEvents-1, name))
	}
	names[n] = name
	nEvents.Store(uint32(n) + 1)
	return n
}

// String is the event's name, e.g. "log file sync".
func (e Event) String() string {
	if e == 0 || uint32(e) >= nEvents.Load() {
		return fmt.Sprintf("event(%d)", uint8(e))
	}
	return names[e]
}

// Events lists every defined event in definition order.
func Events() []Event {
	n := Event(nEvents.Load())
	out := make([]Event, 0, n-1)
	for e := Event(1); e < n; e++ {
		out = append(out, e)
	}
	return out
}

// Lookup finds an event by name.
func Lookup(name string) (Event, bool) {
	n := Event(nEvents.Load())
	for e := Event(1); e < n; e++ {
		if names[e] == name {
			return e, true
		}
	}
	return 0, false
}
