package standby

import (
	"errors"
	"fmt"
	"github.com/tandem-tx/tandem/internal/fileutil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Whether a standby may be promoted without losing what its primary acted
// on.
//
// A standby is synchronized when it holds every decision its primary may
// have acted on (answered to a client, or settled a branch by). Only the
// primary knows that, so it says so in STATE frames, and the standby keeps
// the latest word in its data directory (SyncStateFile), where `tandem
// promote` reads it:
//
//   - sync transport, protected (max-protection, or max-availability within
//     the net timeout), once the standby has caught up: synchronized;
//   - async or arch transport, or max-availability gone UNPROTECTED: not
//     synchronized (the primary answers or settles before the standby has
//     the decision);
//   - a primary that stops cleanly (or hands over) sends a final STATE once
//     the standby has its last record: synchronized.
//
// The standby also decides for itself, conservatively: when its connection
// ends without a final STATE, or when it starts, it is no longer
// synchronized unless its primary is max-protection (which never goes on
// without its standby). A primary that was cut from its standby and went
// on unprotected cannot tell it; that is why a max-availability standby that
// lost its primary unannounced must be promoted with --accept-data-loss.

// SyncStateFile is the file in a standby's data directory that says whether
// it is synchronized with its primary.
const SyncStateFile = "standby-sync"

// UnsynchronizedPromotionFile is written in a data directory promoted with
// --accept-data-loss while not synchronized: it holds the promotion's time.
// The coordinator opened there never presumes abort for a prepared branch
// whose gtrid began before it (coord.Options.InDoubtBefore). The boundary
// is inherited: the primary sends it in WELCOME, and each standby that
// follows it keeps it here too, so that a later promotion of that standby
// (even a synchronized one) goes on treating those gtrids as in doubt.
const UnsynchronizedPromotionFile = "promoted-unsynchronized"

// ErrNotSynchronized is wrapped by a refused promotion.
var ErrNotSynchronized = errors.New("standby: not synchronized with its primary")

// Bits of a STATE frame's one-byte payload.
const (
	stateSynchronized  = 1 << 0
	stateFinal         = 1 << 1 // the primary stops: no more records
	stateMaxProtection = 1 << 2
)

// SyncState is what a standby's data directory says of its synchronization.
type SyncState struct {
	Synchronized bool
	// MaxProtection: the primary's protection mode was max-protection.
	MaxProtection bool
	Reason        string
	At            time.Time
}

// LoadSyncState reads dir's SyncStateFile; a directory without one is not
// synchronized (it was never told).
func LoadSyncState(dir string) (SyncState, error) {
	b, err := os.ReadFile(filepath.Join(dir, SyncStateFile))
	if errors.Is(err, os.ErrNotExist) {
		return SyncState{Reason: "the primary never said this standby holds every decision it acted on"}, nil
	}
	if err != nil {
		return SyncState{}, fmt.Errorf("standby: read %s: %w", SyncStateFile, err)
	}
	var st SyncState
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "synchronized":
			st.Synchronized = v == "yes"
		case "max-protection":
			st.MaxProtection = v == "yes"
		case "reason":
			st.Reason = v
		case "at":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				st.At = time.Unix(0, n)
			}
		}
	}
	return st, nil
}

// saveSyncState writes dir's SyncStateFile durably.
func saveSyncState(dir string, st SyncState) error {
	yn := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	body := fmt.Sprintf("synchronized %s\nmax-protection %s\nat %d\nreason %s\n", yn(st.Synchronized), yn(st.MaxProtection), st.At.UnixNano(), st.Reason)
	return writeFileDurably(dir, SyncStateFile, body)
}

// writeFileDurably writes name in dir: a temporary file, fsync, rename,
// directory fsync.
func writeFileDurably(dir, name, body string) error {
	if err := fileutil.WriteFileDurably(dir, name, body, 0o600); err != nil {
		return fmt.Errorf("standby: write %s: %w", name, err)
	}
	return nil
}

// PromoteOptions says how to promote.
type PromoteOptions struct {
	// AcceptDataLoss promotes a standby that is not synchronized: decisions
	// the old primary made (and may have acted on) and this standby never
	// received are lost. The promoted coordinator then presumes nothing
	// about gtrids it cannot know: their prepared branches are listed as in
	// doubt for an operator to settle (tandem status --in-doubt, tandem
	// resolve), never rolled back by the orphan scan.
	AcceptDataLoss bool
	// CheckedWhileFollowing: the caller (a running standby being promoted)
	// found it synchronized with CheckPromotable while it still followed
	// its primary, before it stopped following; the state it then records
	// for having stopped (not synchronized, since its primary could go on
	// without it) does not apply to this promotion, which fences that
	// primary.
	CheckedWhileFollowing bool
	// OldPrimaryStopped: the operator says the old primary is stopped
	// (--old-primary-stopped). OldPrimaryReached: the caller (a running
	// standby) reached the old primary just before, so the new epoch fences
	// it (it is told at once, and its --peer check asks). A promotion with
	// AcceptDataLoss needs one of them: an old primary cut off by a
	// partition goes on deciding (unprotected), and two coordinators
	// deciding for, and scanning, the same databases can split a
	// transaction.
	OldPrimaryStopped, OldPrimaryReached bool
}

// ErrOldPrimaryMayRun is wrapped by a promotion with --accept-data-loss
// refused because nothing says the old primary is stopped or fenced.
var ErrOldPrimaryMayRun = errors.New("standby: the old primary may still be running")

// OldPrimaryMayRun is the refusal of such a promotion; reach says what was
// tried to reach the old primary ("" when nothing was).
func OldPrimaryMayRun(reach string) error {
	if reach != "" {
		reach = " (" + reach + ")"
	}
	return fmt.Errorf("%w%s: if it runs — a network partition — it goes on deciding, unprotected, while this coordinator decides too, and both settle the same databases: "+
		"a transaction could then commit on one database and roll back on another (a split). "+
		"Make sure the old primary is stopped (its process killed, its machine down or cut off from the databases), then promote with --accept-data-loss --old-primary-stopped",
		ErrOldPrimaryMayRun, reach)
}

// CheckPromotable reports why dir must not be promoted without
// --accept-data-loss (nil: it is synchronized).
func CheckPromotable(dir string) error {
	st, err := LoadSyncState(dir)
	if err != nil {
		return err
	}
	if st.Synchronized {
		return nil
	}
	since := ""
	if !st.At.IsZero() {
		since = " (since " + st.At.UTC().Format(time.RFC3339) + ")"
	}
	return fmt.Errorf("%w%s: %s. Promoting it may lose decisions the old primary made and acted on: transactions its clients were told committed would be missing here, and their branches not yet settled would be listed as in doubt. "+
		"If the old primary can be restarted, restart it instead (nothing is lost). Otherwise promote with --accept-data-loss: this coordinator then never presumes abort for a prepared branch of a gtrid that began before the promotion and is not in its log; "+
		"it lists them (tandem status --in-doubt, metric tandem_in_doubt_branches) for you to settle with tandem resolve after looking at what each database holds",
		ErrNotSynchronized, since, st.Reason)
}

// noteInDoubtBoundary records in dir's UnsynchronizedPromotionFile that
// gtrids from before at are in doubt, unless it already says so of a later
// time (the later boundary covers more gtrids).
func noteInDoubtBoundary(dir string, at time.Time) error {
	cur, ok, err := UnsynchronizedPromotion(dir)
	if err != nil {
		return err
	}
	if ok && !cur.Before(at) {
		return nil
	}
	return writeFileDurably(dir, UnsynchronizedPromotionFile, strconv.FormatInt(at.UnixNano(), 10)+"\n")
}

// UnsynchronizedPromotion reports when dir was promoted with
// --accept-data-loss while not synchronized (ok false: it never was).
func UnsynchronizedPromotion(dir string) (at time.Time, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, UnsynchronizedPromotionFile))
	if errors.Is(err, os.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("standby: read %s: %w", UnsynchronizedPromotionFile, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("standby: %s in %s is damaged (%v): it must hold the promotion's time in Unix nanoseconds; without it the coordinator could presume abort for branches it cannot know", UnsynchronizedPromotionFile, dir, err)
	}
	return time.Unix(0, n), true, nil
}
