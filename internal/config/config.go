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
//	adopt_unowned: false            # settle legacy (unowned) branch names as this coordinator's own
//	rms:
//	  pg:    {driver: postgres, dsn: "postgres://tandem:${TANDEM_DB_PASSWORD}@127.0.0.1:55432/tandem"}
//	  maria: {driver: mysql,    dsn_file: /etc/tandem/maria.dsn, max_conns: 16}
//
// # Secrets
//
// A DSN holds a password, so it need not be written where others can read
// it (a command line is visible in ps):
//
//   - ${NAME} in a DSN (config file dsn, or --rm) is replaced by the
//     environment variable NAME; an unset variable is an error naming it.
//     Only the ${NAME} form is expanded, and only in DSNs ($NAME is left as
//     it is).
//   - dsn_file: FILE in the config file, or --rm NAME=DRIVER:@FILE, reads the
//     DSN from FILE (surrounding white space removed), literally: nothing in
//     it is expanded. A relative dsn_file is relative to the config file's
//     directory; a relative --rm @FILE to the working directory. A DSN that
//     really begins with '@' must therefore be put in a file.
//
// The coordinator warns at start about a config file or dsn_file that other
// users can read (package fileperm). Errors never show a DSN's password.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
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
	Driver string `yaml:"driver"`
	// DSN is the data source name, with ${VAR} expanded once loaded.
	DSN string `yaml:"dsn"`
	// DSNFile, if set, is the file the DSN was read from (DSN then holds its
	// contents): the coordinator checks its permissions.
	DSNFile  string `yaml:"dsn_file"`
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
	// CommitPointSettleAfter: how long a prepared commit-point branch with
	// no decision row waits before the in-doubt scan takes its commit
	// point's key and rolls it back (coord.Options.CommitPointSettleAfter;
	// default 5s).
	CommitPointSettleAfter time.Duration `yaml:"commit_point_settle_after"`
	// LogSize is the decision log's total size: it is circular, made of 8
	// segments of LogSize/8, reused once every transaction in them has
	// ended; past 80% new commits are throttled, past 90% refused.
	LogSize ByteSize `yaml:"log_size"`
	// Commit modes (README, "Commit modes"): defaults for every Commit that
	// does not choose its own.
	Durability  Durability    `yaml:"durability"`   // wait (default) or nowait
	Write       WriteMode     `yaml:"write"`        // immediate (default) or batch
	BatchWindow time.Duration `yaml:"batch_window"` // with write: batch (default 2ms)
	Visibility  Visibility    `yaml:"visibility"`   // sync (default) or async
	RMs         map[string]RM `yaml:"rms"`
	// AdoptUnowned: prepared branches with legacy names (no owner: written
	// by an SDK from before owners existed) are this coordinator's own,
	// settled by its rules (still never presumed aborted when they began
	// before its log was born). Without it they are listed, never settled
	// (docs/ownership.md). For an in-place upgrade of the only coordinator
	// over these databases.
	AdoptUnowned bool `yaml:"adopt_unowned"`
	// StandbyLost (the flag --standby-lost only, never a file's: it is a
	// one-time act): withdraw the max-protection promise this data
	// directory's primary made to a standby that is lost or will be
	// re-seeded (standby.MaxProtectionPromiseFile), so that it may start
	// with a weaker mode, or with no standby, without waiting for that
	// standby to hear it.
	StandbyLost bool `yaml:"-"`
	// Standby is the standby link (README, "Standby"), so that a
	// coordinator can be configured from one file; each field's flag
	// (--standby-listen, --standby-of, --transport, …) overrides it.
	Standby Standby `yaml:"standby"`
}

// Standby configures the standby link: as a primary, where standbys
// connect and how decisions are shipped; as a standby, the primary to
// follow. Values are checked where they are used (the flags' checks).
type Standby struct {
	Listen         string        `yaml:"listen"`          // --standby-listen
	Of             string        `yaml:"of"`              // --standby-of
	Transport      string        `yaml:"transport"`       // --transport: sync, async or arch
	Protection     string        `yaml:"protection"`      // --protection
	NetTimeout     time.Duration `yaml:"net_timeout"`     // --net-timeout (default 10s)
	Peer           string        `yaml:"peer"`            // --peer
	ArchLag        time.Duration `yaml:"arch_lag"`        // --arch-lag (default 1s)
	MaxConnections int           `yaml:"max_connections"` // --max-connections
	SecretFile     string        `yaml:"secret_file"`     // --standby-secret-file
	TLSCert        string        `yaml:"tls_cert"`        // --standby-tls-cert
	TLSKey         string        `yaml:"tls_key"`         // --standby-tls-key
	TLSCA          string        `yaml:"tls_ca"`          // --standby-tls-ca
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
// Each RM's DSN is resolved as the package comment says: ${VAR} expanded,
// or dsn_file read (relative to the file's directory).
func Load(path string) (Config, error) {
	var c Config
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && err.Error() != "EOF" {
		return c, fmt.Errorf("config %s: %s", path, hideValues(err.Error()))
	}
	for _, name := range c.RMNames() {
		r := c.RMs[name]
		switch {
		case r.DSN != "" && r.DSNFile != "":
			return c, fmt.Errorf("config %s: rm %q: set dsn or dsn_file, not both", path, name)
		case r.DSNFile != "":
			if !filepath.IsAbs(r.DSNFile) {
				r.DSNFile = filepath.Join(filepath.Dir(path), r.DSNFile)
			}
			if r.DSN, err = ReadDSNFile(r.DSNFile); err != nil {
				return c, fmt.Errorf("config %s: rm %q: %w", path, name, err)
			}
		default:
			if r.DSN, err = ExpandEnv(r.DSN); err != nil {
				return c, fmt.Errorf("config %s: rm %q: dsn: %w", path, name, err)
			}
		}
		c.RMs[name] = r
	}
	return c, nil
}

// yamlValue is a value quoted in a YAML decoding error ("cannot unmarshal
// !!str `u:pw@tc...` into ..."): it may be the start of a DSN.
var yamlValue = regexp.MustCompile("`[^`]*`")

func hideValues(msg string) string { return yamlValue.ReplaceAllString(msg, "(value hidden)") }

// envRef is one ${...} reference; envName is a valid environment variable name.
var (
	envRef  = regexp.MustCompile(`\$\{([^}]*)\}`)
	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ExpandEnv replaces every ${NAME} in dsn with the environment variable
// NAME. An unset variable, or a "${" not followed by a valid NAME and "}",
// is an error that names the variable and never shows the DSN. Nothing else
// is expanded ($NAME stays as it is). A variable set to "" expands to "".
func ExpandEnv(dsn string) (string, error) {
	var firstErr error
	out := envRef.ReplaceAllStringFunc(dsn, func(ref string) string {
		name := ref[2 : len(ref)-1]
		if !envName.MatchString(name) {
			if firstErr == nil {
				firstErr = fmt.Errorf("${...} with %q inside: write ${NAME} with NAME an environment variable's name (letters, digits, _), or put the DSN in a dsn_file, which is read literally", name)
			}
			return ref
		}
		v, ok := os.LookupEnv(name)
		if !ok && firstErr == nil {
			firstErr = fmt.Errorf("environment variable %s is not set (the DSN uses ${%s}): export it, or use a dsn_file", name, name)
		}
		return v
	})
	if firstErr != nil {
		return "", firstErr
	}
	if strings.Contains(envRef.ReplaceAllString(dsn, ""), "${") {
		return "", errors.New("${ without a closing }: write ${NAME}, or put the DSN in a dsn_file, which is read literally")
	}
	return out, nil
}

// MaxDSNFile bounds a dsn_file's size: a DSN is a line, and a wrong path
// (a log, a device) must not be read whole.
const MaxDSNFile = 64 << 10

// ReadDSNFile reads a DSN from a file: its contents without surrounding
// white space, taken literally. An empty file, or one larger than
// MaxDSNFile, is an error; the error never shows the contents.
func ReadDSNFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("dsn_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxDSNFile+1))
	if err != nil {
		return "", fmt.Errorf("dsn_file: %w", err)
	}
	if len(b) > MaxDSNFile {
		return "", fmt.Errorf("dsn_file %s is larger than %d bytes: is it the right file? It should hold one DSN", path, MaxDSNFile)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" {
		return "", fmt.Errorf("dsn_file %s is empty: write the DSN in it", path)
	}
	return dsn, nil
}

// ParseRMFlag reads NAME=DRIVER:DSN, e.g. pg=postgres:postgres://u:p@host/db.
// ${VAR} in the DSN is expanded; NAME=DRIVER:@FILE reads the DSN from FILE
// (see the package comment).
func ParseRMFlag(s string) (name string, r RM, err error) {
	name, rest, ok := strings.Cut(s, "=")
	driver, dsn, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || name == "" || driver == "" || dsn == "" || dsn == "@" {
		return "", r, fmt.Errorf("config: --rm %q: want NAME=DRIVER:DSN or NAME=DRIVER:@FILE, e.g. pg=postgres:postgres://user:${PGPASSWORD}@127.0.0.1:5432/db", redactFlag(s))
	}
	r = RM{Driver: driver}
	if file, isFile := strings.CutPrefix(dsn, "@"); isFile {
		r.DSNFile = file
		r.DSN, err = ReadDSNFile(file)
	} else {
		r.DSN, err = ExpandEnv(dsn)
	}
	if err != nil {
		return "", RM{}, fmt.Errorf("config: --rm %s: %w", redactFlag(s), err)
	}
	return name, r, nil
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
		c.Durability = DurabilityWait
	}
	if c.Write == "" {
		c.Write = WriteImmediate
	}
	if c.Write == WriteBatch && c.BatchWindow == 0 {
		c.BatchWindow = 2 * time.Millisecond
	}
	if c.Visibility == "" {
		c.Visibility = VisibilitySync
	}
	if c.LogSize == 0 {
		c.LogSize = DefaultLogSize
	}
}

// Durability is the default durability of COMMIT decisions (durability:).
type Durability string

// The durability modes.
const (
	DurabilityWait   Durability = "wait"   // the reply waits for the decision's fdatasync
	DurabilityNoWait Durability = "nowait" // the reply may come before it
)

// WriteMode is how the decision log writes (write:).
type WriteMode string

// The write modes.
const (
	WriteImmediate WriteMode = "immediate" // group commit of whatever waits
	WriteBatch     WriteMode = "batch"     // gather for batch_window first
)

// Visibility is the default visibility of commits (visibility:).
type Visibility string

// The visibility modes.
const (
	VisibilitySync  Visibility = "sync"  // the reply waits for phase 2
	VisibilityAsync Visibility = "async" // the reply comes once the decision is durable
)

// NoWait reports whether COMMIT decisions default to durability nowait.
func (c *Config) NoWait() bool { return c.Durability == DurabilityNoWait }

// AsyncVisibility reports whether commits default to visibility async.
func (c *Config) AsyncVisibility() bool { return c.Visibility == VisibilityAsync }

// LogBatchWindow is the decision log's batch window: 0 in immediate mode.
func (c *Config) LogBatchWindow() time.Duration {
	if c.Write == WriteBatch {
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
			return fmt.Errorf("config: rm %q: dsn is empty: set dsn or dsn_file", name)
		}
	}
	for _, e := range []struct{ key, val, a, b string }{
		{"durability", string(c.Durability), string(DurabilityWait), string(DurabilityNoWait)},
		{"write", string(c.Write), string(WriteImmediate), string(WriteBatch)},
		{"visibility", string(c.Visibility), string(VisibilitySync), string(VisibilityAsync)},
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
	for what, d := range map[string]time.Duration{"orphan_timeout": c.OrphanTimeout, "scan_interval": c.ScanInterval, "phase2_wait": c.Phase2Wait, "max_txn_age": c.MaxTxnAge, "max_clock_skew": c.MaxClockSkew, "commit_point_settle_after": c.CommitPointSettleAfter} {
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
