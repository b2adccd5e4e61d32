package server

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tandem-tx/tandem/internal/standby"
)

// reseedDir moves dir's decision log and cluster identity aside into
// dir/reseeded-<UTC time>/ (nothing is deleted), so that a standby started
// on dir copies its primary's log from the start.
func reseedDir(dir string) (string, error) {
	to := filepath.Join(dir, "reseeded-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.MkdirAll(to, 0o700); err != nil {
		return "", fmt.Errorf("re-seed %s: %w", dir, err)
	}
	for _, name := range []string{"log", standby.IdentityFile} {
		err := os.Rename(filepath.Join(dir, name), filepath.Join(to, name))
		if err != nil && !os.IsNotExist(err) {
			return "", fmt.Errorf("re-seed %s: move %s aside: %w", dir, name, err)
		}
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		d.Close()
	}
	if err != nil {
		return "", fmt.Errorf("re-seed %s: %w", dir, err)
	}
	return to, nil
}
