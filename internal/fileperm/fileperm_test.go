package fileperm

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLooseAndWarning(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		who  string
	}{
		{0o600, ""}, {0o400, ""}, {0o700, ""},
		{0o640, "its group"}, {0o604, "other users"}, {0o644, "its group and other users"}, {0o666, "its group and other users"},
	} {
		p := filepath.Join(dir, "f")
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		who, mode, err := Loose(p)
		if err != nil || who != tc.who || mode != tc.mode {
			t.Errorf("mode %04o: Loose = %q, %04o, %v; want %q", tc.mode, who, mode, err, tc.who)
		}
		w, err := Warning(p, "config file")
		if err != nil {
			t.Fatal(err)
		}
		if tc.who == "" && w != "" {
			t.Errorf("mode %04o: unexpected warning %q", tc.mode, w)
		}
		if tc.who != "" {
			for _, want := range []string{"config file " + p, tc.who, "chmod 600 " + p} {
				if !strings.Contains(w, want) {
					t.Errorf("mode %04o: warning %q lacks %q", tc.mode, w, want)
				}
			}
		}
	}
	if _, err := Warning(filepath.Join(dir, "missing"), "token file"); err == nil {
		t.Error("a missing file gave no error")
	}
}

func TestWarnLogsFileModeAndFix(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tandem.yaml")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	Warn(logger, p, "config file")
	got := buf.String()
	for _, want := range []string{"level=WARN", "file=" + p, "mode=0644", `fix="chmod 600 ` + p + `"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log line %q lacks %q", got, want)
		}
	}
	buf.Reset()
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	Warn(logger, p, "config file")
	if buf.Len() != 0 {
		t.Errorf("a 0600 file was warned about: %q", buf.String())
	}
}
