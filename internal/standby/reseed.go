package standby

import (
	"errors"
	"fmt"
	"github.com/tandem-tx/tandem/internal/fileutil"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/tandem-tx/tandem/internal/wal"
)

// ReseedCommand is what an operator runs to re-seed the standby whose data
// directory is dir; refusals name it.
func ReseedCommand(dir string) string {
	if dir == "" {
		dir = "DIR"
	}
	return "tandem reseed --data-dir " + dir
}

// KeepReseeded is how many reseeded-* directories Reseed keeps in a data
// directory: the newest ones; older ones are removed after a re-seed.
const KeepReseeded = 2

// Reseed makes dir an empty standby data directory again, so that a standby
// started on it copies its primary's log from the start and adopts the
// primary's cluster and epoch: it moves dir/log and dir/cluster aside into
// dir/reseeded-<UTC time>/ and fsyncs the directories. It returns that
// directory. Of the reseeded-* directories only the newest KeepReseeded
// stay: older ones are removed once the new one holds the moved files (a
// failure to remove one is returned with the moved-to directory).
//
// It refuses while a running process (a standby or a coordinator) holds the
// log's lock. The log goes first: a crash between the two moves leaves an
// empty log beside the old identity, which a standby treats as empty (it
// adopts any newer epoch); never the old log without its identity.
func Reseed(dir string) (movedTo string, err error) {
	logDir := filepath.Join(dir, "log")
	idFile := filepath.Join(dir, IdentityFile)
	haveLog, err := exists(logDir)
	if err != nil {
		return "", err
	}
	haveID, err := exists(idFile)
	if err != nil {
		return "", err
	}
	if !haveLog && !haveID {
		return "", fmt.Errorf("standby: re-seed %s: it holds neither a decision log (log/) nor a cluster identity (%s): nothing to re-seed", dir, IdentityFile)
	}
	if haveLog {
		// Take the log's lock, as a coordinator or standby starting would:
		// a running one holds it.
		l, err := wal.Open(wal.Options{Dir: logDir, SegmentSize: 4 << 10}, nil)
		switch {
		case errors.Is(err, wal.ErrLocked):
			return "", fmt.Errorf("standby: re-seed %s: its log is in use by a running standby or coordinator: stop it first: %w", dir, err)
		case err == nil:
			if err := l.Close(); err != nil {
				return "", fmt.Errorf("standby: re-seed %s: %w", dir, err)
			}
		case errors.Is(err, wal.ErrCorrupt):
			// A damaged log is a reason to re-seed; it is moved aside as is.
		default:
			var ve *wal.VersionError
			if !errors.As(err, &ve) {
				return "", fmt.Errorf("standby: re-seed %s: open its log: %w", dir, err)
			}
		}
	}
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	to := filepath.Join(dir, "reseeded-"+stamp)
	for i := 2; ; i++ {
		err := os.Mkdir(to, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", fmt.Errorf("standby: re-seed %s: %w", dir, err)
		}
		to = filepath.Join(dir, fmt.Sprintf("reseeded-%s-%d", stamp, i))
	}
	move := func(name string) error {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(to, name)); err != nil {
			return fmt.Errorf("standby: re-seed %s: move %s aside into %s: %w", dir, name, to, err)
		}
		if err := syncDirs(to, dir); err != nil {
			return fmt.Errorf("standby: re-seed %s: %w", dir, err)
		}
		return nil
	}
	if haveLog {
		if err := move("log"); err != nil {
			return to, err
		}
	}
	if haveID {
		if err := move(IdentityFile); err != nil {
			return to, err
		}
	}
	// A re-seeded directory starts over as a standby: it promises nothing.
	if _, err := ForgetMaxProtectionPromise(dir); err != nil {
		return to, err
	}
	return to, pruneReseeded(dir)
}

// pruneReseeded removes all but the newest KeepReseeded reseeded-*
// directories of dir (their names sort by time).
func pruneReseeded(dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, "reseeded-*"))
	if err != nil {
		return fmt.Errorf("standby: re-seed %s: list earlier copies: %w", dir, err)
	}
	sort.Strings(old)
	for len(old) > KeepReseeded {
		if err := os.RemoveAll(old[0]); err != nil {
			return fmt.Errorf("standby: re-seed %s: remove an old copy (keeping the newest %d): %w", dir, KeepReseeded, err)
		}
		old = old[1:]
	}
	return nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("standby: %w", err)
	}
	return true, nil
}

// syncDirs fsyncs each directory (the entries renamed into and out of it).
func syncDirs(dirs ...string) error {
	for _, d := range dirs {
		if err := fileutil.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}
