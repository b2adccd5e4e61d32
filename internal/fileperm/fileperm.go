// Package fileperm checks that a file holding a secret (a configuration file
// with DSNs, a dsn_file, a token or key file) cannot be read by other users.
//
// It only reports: a loose file is still used, with a warning that names the
// file, its mode and the fix, so that a deployment that relies on a group
// (root:tandem 0640) is not locked out, but nobody is left unaware.
package fileperm

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
)

// Loose reports which other users can read path (following symbolic links):
// "" when only its owner can, otherwise "its group", "other users" or "its
// group and other users". mode is the file's permission bits.
func Loose(path string) (who string, mode fs.FileMode, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, err
	}
	mode = fi.Mode().Perm()
	switch {
	case mode&0o044 == 0o044:
		who = "its group and other users"
	case mode&0o040 != 0:
		who = "its group"
	case mode&0o004 != 0:
		who = "other users"
	}
	return who, mode, nil
}

// Warning is the text of the warning for a file holding a secret that other
// users can read ("" when none is needed). what names the file's role, e.g.
// "config file". A file that cannot be examined gives an error.
func Warning(path, what string) (string, error) {
	who, mode, err := Loose(path)
	if err != nil || who == "" {
		return "", err
	}
	return fmt.Sprintf("%s %s is readable by %s (mode %04o) and holds secrets: run chmod 600 %s",
		what, path, who, mode, path), nil
}

// Warn logs Warning at warn level, with the file, its mode and the fix as
// attributes, when other users can read path. It logs nothing for a private
// file; a file it cannot examine is left to the code that reads it.
func Warn(logger *slog.Logger, path, what string) {
	who, mode, err := Loose(path)
	if err != nil || who == "" {
		return
	}
	msg, _ := Warning(path, what)
	logger.Warn(msg, "file", path, "mode", fmt.Sprintf("%04o", mode), "readable_by", who, "fix", "chmod 600 "+path)
}
