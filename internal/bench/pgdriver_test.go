package bench

import "testing"

// --pg-driver auto gives each baseline the driver of the SDK workload it is
// compared with (a --compare never measures a driver along with Tandem),
// pgx where it measured faster; a suffix overrides it; bad names refused.
func TestPGDriverChoice(t *testing.T) {
	for _, pair := range [][2]string{{WorkloadPlain, WorkloadOnePC}, {WorkloadOLTPSQL, WorkloadOLTP}, {WorkloadSQL, WorkloadXA},
		{WorkloadRaw2PC, WorkloadXA}, {WorkloadXA, WorkloadXAStandby}} {
		if a, b := AutoPGDriver(pair[0]), AutoPGDriver(pair[1]); a != b {
			t.Errorf("auto: %s on %s, its baseline %s on %s; want the same", pair[1], b, pair[0], a)
		}
	}
	for spec, want := range map[string][2]string{
		"1pc": {"1pc", PGDriverPgx}, "oltp": {"oltp", PGDriverPgx}, "xa": {"xa", PGDriverSQL},
		"xa@pgx": {"xa", PGDriverPgx}, "oltp@sql": {"oltp", PGDriverSQL},
	} {
		if n, d := splitWorkload(spec, PGDriverAuto); n != want[0] || d != want[1] {
			t.Errorf("splitWorkload(%q, auto) = %s, %s; want %s, %s", spec, n, d, want[0], want[1])
		}
	}
	if _, d := splitWorkload("oltp", PGDriverSQL); d != PGDriverSQL {
		t.Errorf("--pg-driver sql gave oltp %s", d)
	}
	base := DBConfig{RMs: []DBRM{{Name: "pg", Driver: "postgres", DSN: "x"}, {Name: "maria", Driver: "mysql", DSN: "y"}},
		Threads: 1, Duration: 1, OLTPRows: 100}
	for _, tc := range []struct {
		driver    string
		workloads []string
		ok        bool
	}{
		{"", []string{"xa@sql", "xa@pgx"}, true},
		{"auto", []string{"1pc"}, true},
		{"sql", []string{"xa", "xa@sql"}, false}, // the same workload twice
		{"pgx", []string{"xa@odbc"}, false},
		{"jdbc", []string{"xa"}, false},
		{"", []string{"nosuch@pgx"}, false},
	} {
		cfg := base
		cfg.PGDriver, cfg.Workloads = tc.driver, tc.workloads
		if err := cfg.validate(); (err == nil) != tc.ok {
			t.Errorf("--pg-driver %q %v: validate = %v, want ok %v", tc.driver, tc.workloads, err, tc.ok)
		}
	}
}
