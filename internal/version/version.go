// Package version says which build of Tandem a binary is: its release
// version, the git commit it was built from, and when.
//
// A release build (scripts/release) sets them at link time:
//
//	go build -ldflags "-X github.com/tandem-tx/tandem/internal/version.version=0.3.0
//	  -X github.com/tandem-tx/tandem/internal/version.commit=<full commit hash>
//	  -X github.com/tandem-tx/tandem/internal/version.date=2026-11-26T19:00:00Z
//	  -X github.com/tandem-tx/tandem/internal/version.modified=true" ...
//
// (modified only when the tree had uncommitted changes). Any of them left
// unset falls back to what the Go toolchain recorded in the binary
// (runtime/debug.ReadBuildInfo): a plain `go build` in a git checkout
// records the commit (vcs.revision), its time (vcs.time) and whether the
// tree was modified (vcs.modified); `go install
// github.com/tandem-tx/tandem/cmd/tandem@v0.3.0` records the module version
// v0.3.0 and no commit. A build that is neither a release nor a tagged
// module version says "dev".
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set with -ldflags -X by scripts/release; see the package doc.
var (
	version  string
	commit   string
	date     string
	modified string
)

// Dev is the version of a build that is not a release: a plain go build,
// go run or go test, or go install of a commit that is not a tagged version.
const Dev = "dev"

// Info describes one build. The zero value of a field means unknown.
type Info struct {
	// Version is the release's semantic version without a leading "v"
	// ("0.3.0", "1.0.0-rc.1"), or Dev.
	Version string
	// Commit is the git commit hash the binary was built from (full length
	// when the build recorded it so), or "" when unknown.
	Commit string
	// Modified reports that the tree had uncommitted changes.
	Modified bool
	// Date is a time in RFC 3339 (UTC): the build's when BuildDate is true
	// (a release), else the commit's (vcs.time), or "".
	Date string
	// BuildDate reports that Date is when the binary was built.
	BuildDate bool
	// GoVersion is the toolchain that built it ("go1.26.8").
	GoVersion string
	// Platform is GOOS/GOARCH ("linux/amd64").
	Platform string
}

// Get returns this binary's build information. It is computed once.
func Get() Info { return get() }

var get = sync.OnceValue(func() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(linkFlags{version: version, commit: commit, date: date, modified: modified}, bi)
})

// Version is Get().Version: "0.3.0", or "dev".
func Version() string { return Get().Version }

// linkFlags are the values set with -ldflags -X.
type linkFlags struct{ version, commit, date, modified string }

// pseudoVersion matches a Go module pseudo-version (vX.Y.Z-[pre.]0.yyyymmddhhmmss-abcdefabcdef,
// or vX.0.0-yyyymmddhhmmss-abcdefabcdef), with an optional +build suffix;
// group 1 is the commit hash prefix.
var pseudoVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+-(?:[0-9A-Za-z.-]*[.-])?[0-9]{14}-([0-9a-f]{12})(?:\+[0-9A-Za-z.-]+)?$`)

// resolve combines the link-time values with the build information bi
// (nil when the binary has none): a value set at link time wins.
func resolve(lf linkFlags, bi *debug.BuildInfo) Info {
	in := Info{GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	var vcsRev, vcsTime string
	var vcsModified bool
	modVersion := ""
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				vcsModified = s.Value == "true"
			}
		}
		modVersion = bi.Main.Version
	}

	switch {
	case lf.version != "":
		in.Version = strings.TrimPrefix(lf.version, "v")
	case modVersion == "" || modVersion == "(devel)":
		in.Version = Dev
	case pseudoVersion.MatchString(modVersion):
		// Not a tagged version: go install …@<commit or branch>, or go
		// build in a checkout (Go 1.24 and later stamp a pseudo-version).
		// The hash in it is the commit when nothing else says so.
		in.Version = Dev
		if vcsRev == "" {
			vcsRev = pseudoVersion.FindStringSubmatch(modVersion)[1]
		}
	default:
		v, _, _ := strings.Cut(strings.TrimPrefix(modVersion, "v"), "+") // +dirty, +incompatible
		in.Version = v
	}

	if lf.commit != "" {
		in.Commit = lf.commit
		in.Modified = lf.modified == "true"
	} else {
		in.Commit = vcsRev
		in.Modified = vcsModified
	}
	if lf.date != "" {
		in.Date, in.BuildDate = lf.date, true
	} else {
		in.Date = vcsTime
	}
	return in
}

// ShortCommit is the commit's first 7 hex digits, with "+dirty" when the
// tree was modified, or "unknown".
func (in Info) ShortCommit() string {
	c := in.Commit
	if len(c) > 7 {
		c = c[:7]
	}
	return in.withDirty(c)
}

// FullCommit is the whole commit hash, with "+dirty" when the tree was
// modified, or "unknown".
func (in Info) FullCommit() string { return in.withDirty(in.Commit) }

func (in Info) withDirty(c string) string {
	if c == "" {
		c = "unknown"
	}
	if in.Modified {
		c += "+dirty"
	}
	return c
}

// String is the version and, in parentheses, the commit, the date, the Go
// version and the platform:
//
//	0.3.0 (commit 1a2b3c4, built 2026-11-26T19:00:00Z, go1.26.8, linux/amd64)
//	dev (commit 1a2b3c4+dirty, committed 2026-11-26T18:40:11Z, go1.26.8, linux/amd64)
func (in Info) String() string {
	parts := []string{"commit " + in.ShortCommit()}
	if in.Date != "" {
		if in.BuildDate {
			parts = append(parts, "built "+in.Date)
		} else {
			parts = append(parts, "committed "+in.Date)
		}
	}
	parts = append(parts, in.GoVersion, in.Platform)
	return in.Version + " (" + strings.Join(parts, ", ") + ")"
}

// Line is what `PROG --version` prints: PROG, a space and Get().String().
func Line(prog string) string { return prog + " " + Get().String() }

// IsFlag reports whether a command-line argument asks for the version:
// --version or -version.
func IsFlag(arg string) bool { return arg == "--version" || arg == "-version" }
