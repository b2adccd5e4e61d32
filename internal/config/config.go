// Package config reads the coordinator's configuration from a YAML file and
// command-line flags (flags win), fills in defaults and checks it.
//
// A complete file:
//
//	listen: 127.0.0.1:7070          # gRPC API
//	data_dir: .tandem/coordinator   # decision log and lock file
//	orphan_timeout: 60s             # abort a prepared, undecided branch after this
//	scan_interval: 10s              # in-doubt scan period
//	phase2_wait: 10s                # longest Commit waits for phase 2 without a deadline
//	max_txn_age: 1h                 # Commit of an older gtrid is aborted
//	max_clock_skew: 10s             # a gtrid stamped further in the future is refused
//	log_size: 64MiB                 # decision log size: circular, in 8 segments
//	rms:
//	  pg:    {driver: postgres, dsn: "postgres://tandem:secret@127.0.0.1:55432/tandem"}
//	  maria: {driver: mysql,    dsn: "tandem:secret@tcp(127.0.0.1:53306)/tandem", max_conns: 16}
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// RM configures one resource manager.
type RM struct {
	Driver   string `yaml:"driver"`
	DSN      string `yaml:"dsn"`
	MaxConns int    `yaml:"max_conns"`
}

// Config is the coordinator's whole configuration.
type Config struct {
	Listen        string        `yaml:"listen"`
	DataDir       string        `yaml:"data_dir"`
	OrphanTimeout time.Duration `yaml:"orphan_timeout"`
	ScanInterval  time.Duration `yaml:"scan_interval"`
	Phase2Wait    time.Duration `yaml:"phase2_wait"`
	MaxTxnAge     time.Duration `yaml:"max_txn_age"`
	MaxClockSkew  time.Duration `yaml:"max_clock_skew"`
	// LogSize is the decision log's total size: it is circular, made of 8
	// segments of LogSize/8, reused once every transaction in them has
	// ended; past 80% new commits are throttled, past 90% refused.
	LogSize ByteSize `yaml:"log_size"`
	// Commit modes (README, "Commit modes"): defaults for every Commit that
	// does not choose its own.
	Durability  string        `yaml:"durability"`   // wait (default) or nowait
	Write       string        `yaml:"write"`        // immediate (default) or batch
	BatchWindow time.Duration `yaml:"batch_window"` // with write: batch (default 2ms)
	Visibility  string        `yaml:"visibility"`   // sync (default) or async
	RMs         map[string]RM `yaml:"rms"`
}

// Defaults and limits.
const (
	DefaultListen  = "127.0.0.1:7070"
	DefaultDataDir = ".tandem/coordinator"

	DefaultLogSize ByteSize = 64 << 20
	MinLogSize     ByteSize = 1 << 20
	MaxLogSize     ByteSize = 8 << 30 // a segment (an eighth) is read whole at start
)

// ByteSize is a number of bytes, written as an integer or with a binary
// unit: 1048576, 512KiB, 64MiB, 1GiB (KB, MB, GB and K, M, G mean the
// same powers of 1024).
type ByteSize int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// ParseByteSize reads a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: write a number of bytes, or one with a unit like 512KiB, 64MiB or 1GiB", s)
	}
	return ByteSize(n * mult), nil
}

// String writes b with the largest binary unit that divides it.
func (b ByteSize) String() string {
	switch {
	case b != 0 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + "GiB"
	case b != 0 && b%(1<<20) == 0:
		return strconv.FormatInt(int64(b>>20), 10) + "MiB"
	case b != 0 && b%(1<<10) == 0:
		return strconv.FormatInt(int64(b>>10), 10) + "KiB"
	}
	return strconv.FormatInt(int64(b), 10)
}

// UnmarshalYAML reads a ByteSize from a YAML integer or string.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// Load reads a YAML file. Unknown keys are errors, so a typo is never ignored.
func Load(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseRMFlag reads NAME=DRIVER:DSN, e.g. pg=postgres:postgres://u:p@host/db.
func ParseRMFlag(s string) (name string, r RM, err error) {
	name, rest, ok := strings.Cut(s, "=")
	driver, dsn, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || name == "" || driver == "" || dsn == "" {
		return "", r, fmt.Errorf("config: --rm %q: want NAME=DRIVER:DSN, e.g. pg=postgres:postgres://user:pass@127.0.0.1:5432/db", redactFlag(s))
	}
	return name, RM{Driver: driver, DSN: dsn}, nil
}

// flagHead is what a malformed --rm flag may show: the NAME=DRIVER: part. A
// DSN can hold its password anywhere (user:pass@, ':' or '@' inside the
// password, password=... in keyword/value form), so none of it is shown.
var flagHead = regexp.MustCompile(`^[A-Za-z0-9_-]*(?:=[A-Za-z0-9_-]*)?:?`)

func redactFlag(s string) string {
	if head := flagHead.FindString(s); len(head) < len(s) {
		return head + "…(DSN hidden)"
	}
	return s
}

// SetDefaults fills in every unset field.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Durability == "" {
		c.Durability = "wait"
	}
	if c.Write == "" {
		c.Write = "immediate"
	}
	if c.Write == "batch" && c.BatchWindow == 0 {
		c.BatchWindow = 2 * time.Millisecond
	}
	if c.Visibility == "" {
		c.Visibility = "sync"
	}
	if c.LogSize == 0 {
		c.LogSize = DefaultLogSize
	}
}

// LogBatchWindow is the decision log's batch window: 0 in immediate mode.
func (c *Config) LogBatchWindow() time.Duration {
	if c.Write == "batch" {
		return c.BatchWindow
	}
	return 0
}

// Validate checks what can be checked without connecting.
func (c *Config) Validate() error {
	if len(c.RMs) == 0 {
		return errors.New("config: no resource managers: add --rm NAME=DRIVER:DSN (or rms: in the config file)")
	}
	for _, name := range c.RMNames() {
		r := c.RMs[name]
		if err := xid.ValidateRMName(name); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if _, err := rm.ParseDriver(r.Driver); err != nil {
			return fmt.Errorf("config: rm %q: %w", name, err)
		}
		if r.DSN == "" {
			return fmt.Errorf("config: rm %q: dsn is empty", name)
		}
	}
	for _, e := range []struct{ key, val, a, b string }{
		{"durability", c.Durability, "wait", "nowait"}, {"write", c.Write, "immediate", "batch"}, {"visibility", c.Visibility, "sync", "async"},
	} {
		if e.val != "" && e.val != e.a && e.val != e.b {
			return fmt.Errorf("config: %s %q: use %q or %q", e.key, e.val, e.a, e.b)
		}
	}
	if c.LogSize != 0 && (c.LogSize < MinLogSize || c.LogSize > MaxLogSize) {
		return fmt.Errorf("config: log_size %s: use between %s and %s (e.g. 64MiB)", c.LogSize, MinLogSize, MaxLogSize)
	}
	if c.BatchWindow < 0 || c.BatchWindow > time.Second {
		return fmt.Errorf("config: batch_window %s: use a duration between 0 and 1s (e.g. 1ms)", c.BatchWindow)
	}
	for what, d := range map[string]time.Duration{"orphan_timeout": c.OrphanTimeout, "scan_interval": c.ScanInterval, "phase2_wait": c.Phase2Wait, "max_txn_age": c.MaxTxnAge, "max_clock_skew": c.MaxClockSkew} {
		if d < 0 {
			return fmt.Errorf("config: %s is negative (%s)", what, d)
		}
	}
	return nil
}

// RMNames returns the configured names, sorted.
func (c *Config) RMNames() []string {
	names := make([]string, 0, len(c.RMs))
	for n := range c.RMs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RMConfigs converts the resource managers for package rm.
func (c *Config) RMConfigs() ([]rm.Config, error) {
	var out []rm.Config
	for _, name := range c.RMNames() {
		r := c.RMs[name]
		d, err := rm.ParseDriver(r.Driver)
		if err != nil {
			return nil, fmt.Errorf("config: rm %q: %w", name, err)
		}
		out = append(out, rm.Config{Name: name, Driver: d, DSN: r.DSN, MaxConns: r.MaxConns})
	}
	return out, nil
}
