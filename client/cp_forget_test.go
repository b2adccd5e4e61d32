package client

import (
	"testing"
	"time"

	"github.com/tandem-tx/tandem/xid"
)

// Every decided row queued is handed to a DELETE once it is old enough,
// however many commits a process makes in the meantime. Before, the queue
// kept the newest 4096 and dropped the oldest: past about 117 commits a
// second (4096 ÷ 35 s) no row ever reached the age to be deleted, and the
// decision table grew by every commit (at 32 threads, 1,460 rows a second
// for 10 minutes), left to the coordinator's sweep.
func TestForgetQueueHandsOverEveryRowAtHighRates(t *testing.T) {
	var s cpState
	const n = 20000 // 35 s of commits at 571 a second
	for range n {
		s.addForget(xid.New())
	}
	later := time.Now().Add(forgetAfter + time.Second)
	got := 0
	for {
		gs := s.takeForget(later)
		if gs == nil {
			break
		}
		got += len(gs)
	}
	if got != n {
		t.Fatalf("%d of %d queued rows handed over for deletion once old enough", got, n)
	}
}
