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
// max-protection's waits (no net timeout, never unprotected; async waits
// for the standby's acknowledgement too) until a standby has acknowledged a
// record sent after the STATE that gives the new mode: the standby then
// knows, and the file is removed. The arch transport, which carries no
// STATE, is refused while the file is there. Started with no standby listener at all, the
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
	return fmt.Errorf("%w (%s), and it starts now without a standby listener (--standby-listen): that standby would go on taking itself for synchronized "+
		"and could be promoted without --accept-data-loss, losing what this primary decides from now on. Start with the standby listener "+
		"(the standby learns the new mode when it reconnects; until then commits wait for it, as under max-protection), "+
		"or, if that standby is lost or will be re-seeded, pass --standby-lost (it must then never be promoted without --accept-data-loss)",
		ErrMaxProtectionPromised, filepath.Join(dir, MaxProtectionPromiseFile))
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

// notePromise finds, at start, a promise a weaker mode must first make a
// standby hear (downgrading). The arch transport cannot: it ships completed
// segments only, and the decision waiting for the standby holds the log
// writer that would complete its segment; it is refused then.
func (s *Shipper) notePromise() error {
	if s.cfg.Dir == "" || s.cfg.Protection == MaxProtection {
		return nil
	}
	promised, err := HasMaxProtectionPromise(s.cfg.Dir)
	if err != nil || !promised {
		return err
	}
	if s.cfg.Transport == Arch {
		return fmt.Errorf("%w (%s), and the arch transport cannot make it hear the new mode before acting without it: "+
			"start once with --transport async (or sync) until the standby has connected and heard it (the file then goes), "+
			"or, if that standby is lost or will be re-seeded, pass --standby-lost (it must then never be promoted without --accept-data-loss)",
			ErrMaxProtectionPromised, filepath.Join(s.cfg.Dir, MaxProtectionPromiseFile))
	}
	s.downgrading = true
	s.log.Warn("this primary last told its standby it runs max-protection: until a standby has heard the new mode, commits wait for a standby's acknowledgement as under max-protection (no net timeout)",
		"protection", s.cfg.Protection, "transport", s.cfg.Transport, "file", filepath.Join(s.cfg.Dir, MaxProtectionPromiseFile))
	return nil
}

// keepPromise writes the promise, once, before the first STATE that tells a
// standby this primary runs max-protection (sendLoop).
func (s *Shipper) keepPromise() error {
	if s.cfg.Dir == "" {
		return nil
	}
	s.promiseMu.Lock()
	defer s.promiseMu.Unlock()
	if s.promiseKept {
		return nil
	}
	if promised, err := HasMaxProtectionPromise(s.cfg.Dir); err != nil {
		return err
	} else if !promised {
		if err := writeFileDurably(s.cfg.Dir, MaxProtectionPromiseFile,
			"this primary told a standby it runs max-protection: restarted with a weaker mode, it keeps max-protection's waits until a standby has heard the new mode\n"); err != nil {
			return err
		}
	}
	s.promiseKept = true
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

// heardLocked reports whether an acknowledgement on a connection ends
// downgrading, and ends it: only on a sync or async connection that has
// been sent a STATE (stated), which gives this primary's mode without the
// max-protection bit; the standby records a STATE durably before it writes,
// and so before it acknowledges, any record sent after it. (While closing,
// records may go before any STATE: those acknowledgements prove nothing.)
// The caller then removes the file (forgetPromise), outside s.mu.
func (s *Shipper) heardLocked(stated bool) bool {
	if !s.downgrading || !stated {
		return false
	}
	s.downgrading = false
	s.notifyLocked() // waiters re-read the protection: the net timeout applies again
	return true
}

// forgetPromise removes the promise once a standby has heard the new mode;
// a failure only costs a wait after a restart.
func (s *Shipper) forgetPromise() {
	s.log.Info("the standby has heard that this primary no longer runs max-protection: its own mode applies from now on",
		"protection", s.cfg.Protection)
	s.promiseMu.Lock()
	defer s.promiseMu.Unlock()
	if _, err := ForgetMaxProtectionPromise(s.cfg.Dir); err != nil {
		s.log.Error("could not remove the max-protection promise; after a restart commits wait for a standby once more", "error", err)
	}
}
