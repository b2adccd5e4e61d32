package standby

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tandem-tx/tandem/internal/fileutil"
)

// A max-protection primary's promise, kept across restarts.
//
// A standby trusts a max-protection primary across a disconnect: such a
// primary stalls rather than act on a decision its standby lacks, so the
// standby stays synchronized (promotable without --accept-data-loss) when
// the connection ends unannounced. That trust would outlive the mode if the
// primary were restarted with a weaker --protection while its standby is
// away: it would go on unprotected after its net timeout, and if it were
// then lost before the standby reconnected, the standby would be promoted
// as synchronized without the decisions acted on meanwhile (a COMMIT told
// to a client, then presumed aborted).
//
// So the primary remembers its promise. Before it first tells a standby it
// runs max-protection, it writes MaxProtectionPromiseFile in its data
// directory. Restarted with a weaker mode while the file is there, it keeps
// max-protection's waits (no net timeout, never unprotected, every
// transport waits for the standby's acknowledgement) until a standby has
// acknowledged a record sent after the STATE that gives the new mode (on
// arch connections, which carry no STATE, the standby records "not
// synchronized" before it acknowledges anything): the standby then knows,
// and the file is removed. Started with no standby listener at all, the
// primary refuses to start while the file is there, unless the operator
// says the standby is lost (--standby-lost, ForgetMaxProtectionPromise).
// A data directory that follows a primary (a standby) no longer promises
// anything: the file is removed there.

// MaxProtectionPromiseFile is the file in a primary's data directory that
// says a standby may believe this primary runs max-protection.
const MaxProtectionPromiseFile = "standby-max-protection"

// ErrMaxProtectionPromised is wrapped by the refusal to start a primary
// without a standby listener while its data directory promised a standby
// max-protection.
var ErrMaxProtectionPromised = errors.New("standby: this data directory's primary told a standby it runs max-protection")

// HasMaxProtectionPromise reports whether dir holds MaxProtectionPromiseFile.
func HasMaxProtectionPromise(dir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dir, MaxProtectionPromiseFile))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("standby: %s: %w", MaxProtectionPromiseFile, err)
}

// CheckNoMaxProtectionPromise is the check of a primary that starts without
// a standby listener: it fails, wrapping ErrMaxProtectionPromised, while dir
// holds the promise (its standby would still take itself for synchronized).
func CheckNoMaxProtectionPromise(dir string) error {
	promised, err := HasMaxProtectionPromise(dir)
	if err != nil || !promised {
		return err
	}
	return fmt.Errorf("%w, and it starts now without a standby listener (--standby-listen): that standby would go on taking itself for synchronized "+
		"and could be promoted without --accept-data-loss, losing what this primary decides from now on. Start with the standby listener "+
		"(the standby learns the new mode when it reconnects; until then commits wait for it, as under max-protection), "+
		"or, if that standby is lost or will be re-seeded, pass --standby-lost (it must then never be promoted without --accept-data-loss)",
		ErrMaxProtectionPromised)
}

// ForgetMaxProtectionPromise removes dir's MaxProtectionPromiseFile
// durably; it reports whether there was one.
func ForgetMaxProtectionPromise(dir string) (bool, error) {
	promised, err := HasMaxProtectionPromise(dir)
	if err != nil || !promised {
		return false, err
	}
	if err := os.Remove(filepath.Join(dir, MaxProtectionPromiseFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("standby: remove %s: %w", MaxProtectionPromiseFile, err)
	}
	if err := fileutil.SyncDir(dir); err != nil {
		return false, fmt.Errorf("standby: remove %s: %w", MaxProtectionPromiseFile, err)
	}
	return true, nil
}

// notePromise writes the promise before a max-protection shipper can send
// its first STATE, or finds one a weaker mode must first make a standby
// hear (downgrading).
func (s *Shipper) notePromise() error {
	if s.cfg.Dir == "" {
		return nil
	}
	promised, err := HasMaxProtectionPromise(s.cfg.Dir)
	if err != nil {
		return err
	}
	switch {
	case s.cfg.Protection == MaxProtection && !promised:
		return writeFileDurably(s.cfg.Dir, MaxProtectionPromiseFile,
			"this primary told a standby it runs max-protection: restarted with a weaker mode, it keeps max-protection's waits until a standby has heard the new mode\n")
	case s.cfg.Protection != MaxProtection && promised:
		s.downgrading = true
		s.log.Warn("this primary last told its standby it runs max-protection: until a standby has heard the new mode, commits wait for a standby's acknowledgement as under max-protection (no net timeout)",
			"protection", s.cfg.Protection, "transport", s.cfg.Transport, "file", filepath.Join(s.cfg.Dir, MaxProtectionPromiseFile))
	}
	return nil
}

// protectionLocked is the protection the waits for the standby follow:
// max-protection while downgrading.
func (s *Shipper) protectionLocked() Protection {
	if s.downgrading {
		return MaxProtection
	}
	return s.cfg.Protection
}

// downgradeHeardLocked ends downgrading on the first acknowledgement from a
// standby: on sync and async connections the first frame is always a STATE
// (the new mode, without the max-protection bit), which the standby records
// durably before it writes and acknowledges any record after it; on arch
// connections the standby records "not synchronized" before it
// acknowledges anything. The file goes in the background: once the standby
// knows, it only costs a wait after a restart.
func (s *Shipper) downgradeHeardLocked() {
	s.downgrading = false
	s.log.Info("the standby has heard that this primary no longer runs max-protection: its own mode applies from now on",
		"protection", s.cfg.Protection, "standby", s.peer)
	go func() {
		if _, err := ForgetMaxProtectionPromise(s.cfg.Dir); err != nil {
			s.log.Error("could not remove the max-protection promise; after a restart commits wait for a standby once more", "error", err)
		}
	}()
}
