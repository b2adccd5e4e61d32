package e2e

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/client/prommetrics"
	"github.com/tandem-tx/tandem/waits"
)

// The SDK's metrics count every transaction where it was decided: commits
// at a commit point (which never reach a coordinator), one-phase, local and
// two-phase commits, aborts by stage, rollbacks — scraped over HTTP from a
// Prometheus registry the application passed in, and checked against the
// transactions this test ran.
func TestClientMetricsCountWhatRan(t *testing.T) {
	c := startCoordinator(t, coordOpts{})
	d := openDBs(t)
	d.table(t, "e2e_cmetrics")
	reg := waits.NewRegistry(waits.SideClient)
	cli, err := client.New(client.Config{Coordinator: c.addr, Waits: reg, RMs: []client.RM{
		{Name: "pg", Driver: "postgres", DB: d.pg}, {Name: "maria", Driver: "mysql", MultiStatements: true, DB: d.my}}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	pr := prometheus.NewRegistry()
	if err := prommetrics.Register(pr, cli); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(pr, promhttp.HandlerOpts{}))
	defer srv.Close()

	ctx := context.Background()
	id := 0
	run := func(opts client.CommitOptions, pg, my string, rollback bool) (client.Result, error) {
		t.Helper()
		id++
		tx := cli.Begin()
		tx.SetOptions(opts)
		for _, s := range []struct{ rm, sql string }{{"pg", pg}, {"maria", my}} {
			if s.sql == "" {
				continue
			}
			db := map[string]*sql.DB{"pg": d.pg, "maria": d.my}[s.rm]
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			b, err := tx.Branch(ctx, s.rm, conn)
			if err != nil {
				t.Fatal(err)
			}
			q := strings.ReplaceAll(s.sql, "ID", itoa(id))
			if strings.HasPrefix(q, "SELECT") {
				rows, err := b.QueryContext(ctx, q)
				if err == nil {
					rows.Close()
				}
			} else {
				_, _ = b.ExecContext(ctx, q) // a failing one dooms the transaction
			}
		}
		if rollback {
			return client.Result{}, tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}
	insPG, insMy := "INSERT INTO e2e_cmetrics VALUES (ID, 'pg')", "INSERT INTO e2e_cmetrics VALUES (ID, 'maria')"
	want := map[string]float64{}
	for range 7 { // commit point (the default)
		if res, err := run(client.CommitOptions{}, insPG, insMy, false); err != nil || res.Path != client.PathCommitPoint {
			t.Fatalf("commit-point transaction: %v %v", res.Path, err)
		}
	}
	want[`tandem_client_commits_total{path="commit-point"}`] = 7
	for range 3 {
		if res, err := run(client.CommitOptions{DecideAt: client.DecideAtCoordinator}, insPG, insMy, false); err != nil || res.Path != client.PathTwoPhase {
			t.Fatalf("two-phase transaction: %v %v", res.Path, err)
		}
	}
	want[`tandem_client_commits_total{path="two-phase"}`] = 3
	for range 4 {
		if res, err := run(client.CommitOptions{}, insPG, "", false); err != nil || res.Path != client.PathOnePhase {
			t.Fatalf("one-phase transaction: %v %v", res.Path, err)
		}
	}
	want[`tandem_client_commits_total{path="one-phase"}`] = 4
	for range 2 {
		if res, err := run(client.CommitOptions{}, "SELECT 1", "", false); err != nil || res.Path != client.PathLocal {
			t.Fatalf("local transaction: %v %v", res.Path, err)
		}
	}
	want[`tandem_client_commits_total{path="local"}`] = 2
	for range 5 {
		if _, err := run(client.CommitOptions{}, insPG, insMy, true); err != nil {
			t.Fatal(err)
		}
	}
	want[`tandem_client_rollbacks_total`] = 5
	for range 6 { // a statement fails: the Commit aborts at stage "statement"
		_, err := run(client.CommitOptions{}, insPG, "INSERT INTO no_such_table_cmetrics VALUES (1)", false)
		var ab *client.AbortedError
		if !errors.As(err, &ab) || ab.Stage() != "statement" {
			t.Fatalf("a commit after a failed statement: %v, want an abort at stage statement", err)
		}
	}
	want[`tandem_client_aborts_total{stage="statement"}`] = 6
	want[`tandem_client_aborts_total{stage="prepare"}`] = 0
	want[`tandem_client_outcome_unknown_total`] = 0
	want[`tandem_client_commit_seconds_count{path="commit-point"}`] = 7
	want[`tandem_client_commit_seconds_count{path="two-phase"}`] = 3
	want[`tandem_client_failed_commit_seconds_count{outcome="aborted"}`] = 6
	// Two-phase commits prepare both branches; commit-point ones prepare one.
	want[`tandem_wait_seconds_count{event="rm prepare",side="client"}`] = 3*2 + 7
	want[`tandem_wait_seconds_count{event="coordinator commit",side="client"}`] = 3

	got := scrape(t, srv.URL)
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if v := got[`tandem_client_commit_seconds_bucket{le="+Inf",path="commit-point"}`]; v != 7 {
		t.Errorf("commit-point latency histogram's +Inf bucket = %v, want 7", v)
	}
	if v := got[`tandem_client_commit_seconds_sum{path="commit-point"}`]; v <= 0 || v > 7*20 {
		t.Errorf("commit-point latency sum = %v s, want a positive time for 7 commits", v)
	}
	t.Logf("scrape excerpt:\n%s", excerpt(t, srv.URL, "tandem_client_commits_total", "tandem_client_aborts_total{stage=\"statement\"}",
		"tandem_client_commit_seconds_sum", "tandem_client_commit_seconds_count", `tandem_wait_seconds_count{event="rm prepare"`))
}

// scrape reads a Prometheus text exposition into "name{labels sorted}" →
// value (histograms as _bucket, _sum and _count), parsed by the
// Prometheus parser.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := httptestGet(url)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(resp))
	if err != nil {
		t.Fatalf("the scrape does not parse: %v\n%s", err, resp)
	}
	out := map[string]float64{}
	key := func(name string, lp []*dto.LabelPair, extra ...string) string {
		var ls []string
		for _, l := range lp {
			ls = append(ls, l.GetName()+`="`+l.GetValue()+`"`)
		}
		ls = append(ls, extra...)
		sort.Strings(ls)
		if len(ls) == 0 {
			return name
		}
		return name + "{" + strings.Join(ls, ",") + "}"
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key(name, m.GetLabel())] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key(name, m.GetLabel())] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key(name+"_count", m.GetLabel())] = float64(h.GetSampleCount())
				out[key(name+"_sum", m.GetLabel())] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key(name+"_bucket", m.GetLabel(), `le="`+model.SampleValue(b.GetUpperBound()).String()+`"`)] = float64(b.GetCumulativeCount())
				}
				out[key(name+"_bucket", m.GetLabel(), `le="+Inf"`)] = float64(h.GetSampleCount())
			}
		}
	}
	return out
}

func excerpt(t *testing.T, url string, prefixes ...string) string {
	body, err := httptestGet(url)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

func httptestGet(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
