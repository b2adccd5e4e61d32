package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func buildInfo(mainVersion string, settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/tandem-tx/tandem", Version: mainVersion}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return bi
}

const rev = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"

func TestResolve(t *testing.T) {
	vcs := []string{"vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-26T18:40:11Z", "vcs.modified", "false"}
	vcsDirty := []string{"vcs", "git", "vcs.revision", rev, "vcs.time", "2026-11-26T18:40:11Z", "vcs.modified", "true"}
	for _, tc := range []struct {
		name string
		lf   linkFlags
		bi   *debug.BuildInfo
		want Info
	}{
		{
			name: "release build: the link-time values win over the toolchain's",
			lf:   linkFlags{version: "0.3.0", commit: rev, date: "2026-11-26T19:00:00Z"},
			bi:   buildInfo("v0.0.0-20261126184011-1a2b3c4d5e6f+dirty", vcsDirty...),
			want: Info{Version: "0.3.0", Commit: rev, Date: "2026-11-26T19:00:00Z", BuildDate: true, GoVersion: "go1.26.8"},
		},
		{
			name: "release build from a dirty tree (--allow-dirty), leading v dropped",
			lf:   linkFlags{version: "v1.0.0-rc.1", commit: rev, date: "2026-11-26T19:00:00Z", modified: "true"},
			bi:   buildInfo("(devel)"),
			want: Info{Version: "1.0.0-rc.1", Commit: rev, Modified: true, Date: "2026-11-26T19:00:00Z", BuildDate: true, GoVersion: "go1.26.8"},
		},
		{
			name: "go build in a checkout (Go 1.24+: a pseudo-version, vcs settings)",
			bi:   buildInfo("v0.0.0-20261126184011-1a2b3c4d5e6f+dirty", vcsDirty...),
			want: Info{Version: Dev, Commit: rev, Modified: true, Date: "2026-11-26T18:40:11Z", GoVersion: "go1.26.8"},
		},
		{
			name: "go build in a checkout at a tag",
			bi:   buildInfo("v0.3.0", vcs...),
			want: Info{Version: "0.3.0", Commit: rev, Date: "2026-11-26T18:40:11Z", GoVersion: "go1.26.8"},
		},
		{
			name: "go build at a tag with uncommitted changes",
			bi:   buildInfo("v0.3.0+dirty", vcsDirty...),
			want: Info{Version: "0.3.0", Commit: rev, Modified: true, Date: "2026-11-26T18:40:11Z", GoVersion: "go1.26.8"},
		},
		{
			name: "go install …@v0.3.0 (module version, no vcs settings)",
			bi:   buildInfo("v0.3.0"),
			want: Info{Version: "0.3.0", GoVersion: "go1.26.8"},
		},
		{
			name: "go install …@main: the pseudo-version's hash is the commit",
			bi:   buildInfo("v0.3.1-0.20261126184011-1a2b3c4d5e6f"),
			want: Info{Version: Dev, Commit: "1a2b3c4d5e6f", GoVersion: "go1.26.8"},
		},
		{
			name: "pre-release base pseudo-version",
			bi:   buildInfo("v1.0.0-rc.1.0.20261126184011-1a2b3c4d5e6f"),
			want: Info{Version: Dev, Commit: "1a2b3c4d5e6f", GoVersion: "go1.26.8"},
		},
		{
			name: "go build with -buildvcs=false",
			bi:   buildInfo("(devel)"),
			want: Info{Version: Dev, GoVersion: "go1.26.8"},
		},
		{
			name: "no build information at all",
			want: Info{Version: Dev, GoVersion: runtime.Version()},
		},
		{
			name: "only the version set at link time: the commit from vcs",
			lf:   linkFlags{version: "0.3.0"},
			bi:   buildInfo("(devel)", vcs...),
			want: Info{Version: "0.3.0", Commit: rev, Date: "2026-11-26T18:40:11Z", GoVersion: "go1.26.8"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.Platform = runtime.GOOS + "/" + runtime.GOARCH
			if got := resolve(tc.lf, tc.bi); got != tc.want {
				t.Errorf("resolve(%+v, …)\n got %+v\nwant %+v", tc.lf, got, tc.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   Info
		want string
	}{
		{Info{Version: "0.3.0", Commit: rev, Date: "2026-11-26T19:00:00Z", BuildDate: true, GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"0.3.0 (commit 1a2b3c4, built 2026-11-26T19:00:00Z, go1.26.8, linux/amd64)"},
		{Info{Version: Dev, Commit: rev, Modified: true, Date: "2026-11-26T18:40:11Z", GoVersion: "go1.26.8", Platform: "linux/arm64"},
			"dev (commit 1a2b3c4+dirty, committed 2026-11-26T18:40:11Z, go1.26.8, linux/arm64)"},
		{Info{Version: "0.3.0", GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"0.3.0 (commit unknown, go1.26.8, linux/amd64)"},
	} {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
	in := Info{Commit: rev, Modified: true}
	if got := in.FullCommit(); got != rev+"+dirty" {
		t.Errorf("FullCommit() = %q", got)
	}
	if got := (Info{}).FullCommit(); got != "unknown" {
		t.Errorf("FullCommit() of nothing = %q, want unknown", got)
	}
}

// The test binary itself: not a release, built by this toolchain.
func TestGet(t *testing.T) {
	in := Get()
	if in.Version == "" || in.GoVersion == "" || in.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("Get() = %+v: version, Go version or platform missing", in)
	}
	if Version() != in.Version {
		t.Errorf("Version() = %q, Get().Version = %q", Version(), in.Version)
	}
	if got, want := Line("tandem"), "tandem "+in.String(); got != want {
		t.Errorf("Line = %q, want %q", got, want)
	}
}

func TestIsFlag(t *testing.T) {
	for arg, want := range map[string]bool{"--version": true, "-version": true, "version": false, "-v": false, "--versions": false} {
		if IsFlag(arg) != want {
			t.Errorf("IsFlag(%q) = %v, want %v", arg, !want, want)
		}
	}
}
