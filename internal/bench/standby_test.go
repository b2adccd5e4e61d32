package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/standby"
)

func standbyTestConfig(workloads string, sc StandbyConfig) DBConfig {
	c := DefaultDBConfig()
	c.Workloads = strings.Split(workloads, ",")
	c.RMs = []DBRM{{Name: "pg", Driver: rm.Postgres, DSN: "x"}, {Name: "maria", Driver: rm.MySQL, DSN: "y"}}
	c.Standby = sc
	return c
}

func TestValidateStandby(t *testing.T) {
	for _, tc := range []struct {
		workloads string
		sc        StandbyConfig
		coord     string
		want      string // "" for valid
	}{
		{"xa,xa-standby", StandbyConfig{Transport: "sync"}, "", ""},
		{"xa,xa-standby", StandbyConfig{Transport: "async", RTT: 100 * time.Millisecond}, "", ""},
		{"xa,xa-standby", StandbyConfig{Transport: "sync", Protection: "max-protection", RTT: 10 * time.Millisecond, Bandwidth: 1e6}, "", ""},
		{"xa-standby", StandbyConfig{Transport: "sync"}, "", ""},
		{"sql,xa", StandbyConfig{}, "", ""},
		{"sql,xa", StandbyConfig{Transport: "sync"}, "", "add it (e.g. --compare xa,xa-standby)"},
		{"xa", StandbyConfig{RTT: time.Millisecond}, "", "configure the xa-standby workload"},
		{"xa,xa-standby", StandbyConfig{}, "", "xa-standby needs --standby sync or --standby async"},
		{"xa,xa-standby", StandbyConfig{Transport: "fast"}, "", `unknown transport "fast": use sync or async`},
		{"xa,xa-standby", StandbyConfig{Transport: "async", Protection: "max-protection"}, "", "needs transport sync"},
		{"xa,xa-standby", StandbyConfig{Transport: "arch"}, "", "xa-standby measures sync or async"},
		{"xa,xa-standby", StandbyConfig{Transport: "sync", Protection: "best"}, "", `unknown protection mode "best"`},
		{"xa,xa-standby", StandbyConfig{Transport: "sync", RTT: -time.Millisecond}, "", "negative"},
		{"xa,xa-standby", StandbyConfig{Transport: "sync"}, "127.0.0.1:7070", "drop --coordinator"},
	} {
		c := standbyTestConfig(tc.workloads, tc.sc)
		c.Coordinator = tc.coord
		err := c.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %+v: %v", tc.workloads, tc.sc, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %+v: got %v, want an error with %q", tc.workloads, tc.sc, err, tc.want)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1000": 1000, "4MB/s": 4e6, "4 MB/s": 4e6, "512KiB/s": 512 << 10, "100Mbit/s": 12.5e6, "1Gbps": 125e6, "2.5MB": 2.5e6, "64kb/s": 64e3,
	} {
		got, err := ParseBandwidth(in)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "fast", "4XB/s", "-1MB/s", "MB/s"} {
		if _, err := ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q): no error", in)
		}
	}
}

func TestLagAggregation(t *testing.T) {
	var a lagAgg
	if r := a.result(100 * time.Millisecond); r.Samples != 0 || r.LagSecondsMean != 0 {
		t.Fatalf("empty: %+v", r)
	}
	for _, st := range []standby.Status{
		{Transport: "sync", Connected: true, Protected: true},
		{Transport: "sync", Connected: true, Protected: true, LagBytes: 300, LagSeconds: 0.004, LagRecords: 3},
		{Transport: "sync", Connected: true, Protected: false, LagBytes: 100, LagSeconds: 0.002, LagRecords: 1},
		{Transport: "sync", Connected: false, Protected: false},
	} {
		a.add(st)
	}
	r := a.result(100 * time.Millisecond)
	want := StandbyLag{Samples: 4, SampleIntervalS: 0.1, LagBytesMax: 300, LagBytesMean: 100, LagSecondsMax: 0.004, LagSecondsMean: 0.0015,
		ExposureRecordsMax: 3, ExposureRecordsMean: 1, DisconnectedSamples: 1, UnprotectedSamples: 2}
	if r != want {
		t.Errorf("got %+v\nwant %+v", r, want)
	}
	var async lagAgg
	async.add(standby.Status{Transport: "async", Connected: true, LagSeconds: 0.2})
	if r := async.result(time.Second); r.UnprotectedSamples != 0 || r.LagSecondsMax != 0.2 {
		t.Errorf("async: %+v", r)
	}
}
