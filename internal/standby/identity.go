package standby

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// IdentityFile is the file in a data directory that names the cluster and
// the epoch the coordinator there belongs to.
const IdentityFile = "cluster"

// Identity is a data directory's cluster, epoch and birth. The epoch grows
// by one at every promotion: a primary with an older epoch has been
// superseded.
//
// The cluster is also the owner of every branch this cluster's coordinators
// decide (xid.Owner, docs/ownership.md). Born is when the cluster's decision
// log was created (a standby takes its primary's): a coordinator has no
// record of what happened before it, so it never presumes abort for a gtrid
// that began earlier (coord.Options.Born). The zero Born: not known (an
// identity written before births were recorded; PrimaryIdentity sets it).
type Identity struct {
	Cluster ClusterID
	Epoch   uint64
	Born    time.Time
	// Made is when the cluster id was made, if it was made together with
	// the log (then Made equals Born): no client can have named a branch
	// with it before Born. Zero: not known (an identity from before births
	// were recorded). A standby takes its primary's Born and Made.
	Made time.Time
}

// MadeWithLog reports whether the cluster id was made together with the
// log (Made equals Born): a branch named with it cannot predate Born.
func (id Identity) MadeWithLog() bool { return !id.Made.IsZero() && id.Made.Equal(id.Born) }

// LoadIdentity reads dir's identity; ok is false when it has none yet.
func LoadIdentity(dir string) (id Identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, IdentityFile))
	if errors.Is(err, os.ErrNotExist) {
		return id, false, nil
	}
	if err != nil {
		return id, false, fmt.Errorf("standby: read the cluster identity: %w", err)
	}
	bad := func(why string) error {
		return fmt.Errorf("standby: %s: %s", filepath.Join(dir, IdentityFile), why)
	}
	var haveID, haveEpoch bool
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch k {
		case "cluster":
			raw, err := hex.DecodeString(v)
			if err != nil || len(raw) != 16 {
				return id, false, bad("cluster is not 32 hexadecimal digits")
			}
			copy(id.Cluster[:], raw)
			haveID = true
		case "epoch":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n == 0 {
				return id, false, bad("epoch is not a positive number")
			}
			id.Epoch, haveEpoch = n, true
		case "born", "made":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || t.IsZero() {
				return id, false, bad(k + " is not a time in RFC 3339 form (e.g. 2026-11-26T11:18:34.123456789Z)")
			}
			if k == "born" {
				id.Born = t
			} else {
				id.Made = t
			}
		}
	}
	if !haveID || !haveEpoch {
		return id, false, bad("cluster or epoch missing")
	}
	return id, true, nil
}

// SaveIdentity writes dir's identity durably (a temporary file, fsync,
// rename, directory fsync).
func SaveIdentity(dir string, id Identity) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	body := fmt.Sprintf("cluster %s\nepoch %d\n", id.Cluster, id.Epoch)
	if !id.Born.IsZero() {
		body += "born " + id.Born.UTC().Format(time.RFC3339Nano) + "\n"
	}
	if !id.Made.IsZero() {
		body += "made " + id.Made.UTC().Format(time.RFC3339Nano) + "\n"
	}
	return writeFileDurably(dir, IdentityFile, body)
}

// PrimaryIdentity returns dir's identity, making a new cluster at epoch 1,
// born now, if it has none. An identity without a birth (written before
// births were recorded) is given born=now, durably. bornNow says that the
// birth was set by this call: if dir already held a decision log (an
// upgrade), the caller tells the operator that gtrids that began before now
// are listed, not presumed aborted.
func PrimaryIdentity(dir string) (id Identity, bornNow bool, err error) {
	id, ok, err := LoadIdentity(dir)
	if err != nil {
		return id, false, err
	}
	if ok {
		if !id.Born.IsZero() {
			return id, false, nil
		}
		id.Born = time.Now()
		return id, true, SaveIdentity(dir, id)
	}
	if _, err := rand.Read(id.Cluster[:]); err != nil {
		return id, false, err
	}
	now := time.Now()
	id.Epoch, id.Born, id.Made = 1, now, now
	return id, true, SaveIdentity(dir, id)
}

// Promote bumps dir's epoch by one: the standby there becomes the primary
// of a new epoch, and a primary of an older one is fenced. It returns the
// new identity.
//
// A standby that is not synchronized (CheckPromotable) is refused unless
// o.AcceptDataLoss and the old primary is known stopped or reached
// (o.OldPrimaryStopped, o.OldPrimaryReached); then the promotion's time is
// first written to
// UnsynchronizedPromotionFile. The
// standby's SyncStateFile is removed: the directory is a primary's now.
func Promote(dir string, o PromoteOptions) (Identity, error) {
	id, ok, err := LoadIdentity(dir)
	if err != nil {
		return id, err
	}
	if !ok {
		return id, fmt.Errorf("standby: %s has no cluster identity: it never received a primary's log, there is nothing to promote", dir)
	}
	if err := CheckPromotable(dir); err != nil && !o.CheckedWhileFollowing {
		if !o.AcceptDataLoss {
			return id, fmt.Errorf("refusing to promote %s: %w", dir, err)
		}
		if !o.OldPrimaryStopped && !o.OldPrimaryReached {
			return id, fmt.Errorf("refusing to promote %s with --accept-data-loss: %w", dir, OldPrimaryMayRun(""))
		}
		if err := noteInDoubtBoundary(dir, time.Now()); err != nil {
			return id, err
		}
	}
	id.Epoch++
	if err := SaveIdentity(dir, id); err != nil {
		return id, err
	}
	if err := os.Remove(filepath.Join(dir, SyncStateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return id, fmt.Errorf("standby: promoted, but removing %s: %w", SyncStateFile, err)
	}
	return id, nil
}
