// Package prommetrics exports the Tandem SDK's metrics to a Prometheus
// registry the application passes in: how many global transactions each
// client committed, by path (local, one-phase, commit point, coordinator),
// how long its Commits took, how many ended in abort (by stage) or with an
// unknown outcome, and every wait event of the client's wait registry —
// under the same names and buckets as the coordinator's /metrics
// (tandem_wait_seconds, tandem_wait_max_seconds, side="client").
//
// Commits decided at a commit point never reach a coordinator: these
// metrics are where a service's commits are counted. Import this package
// only if the application uses the Prometheus Go client; the client
// package itself does not depend on it.
//
//	cli, _ := client.New(cfg)
//	if err := prommetrics.Register(prometheus.DefaultRegisterer, cli); err != nil { … }
//	http.Handle("/metrics", promhttp.Handler())
//
// Every value is read from the clients at scrape time (Client.Metrics, a
// wait registry's Snapshot): nothing is added to a transaction's path.
package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandem-tx/tandem/client"
	"github.com/tandem-tx/tandem/waits"
)

// Names of the metrics (the wait events' are the coordinator's).
const (
	CommitsTotal          = "tandem_client_commits_total"
	CommitSeconds         = "tandem_client_commit_seconds"
	AbortsTotal           = "tandem_client_aborts_total"
	UnknownTotal          = "tandem_client_outcome_unknown_total"
	FailedCommitSeconds   = "tandem_client_failed_commit_seconds"
	RollbacksTotal        = "tandem_client_rollbacks_total"
	CoordinatorCallsTotal = "tandem_client_coordinator_calls_total"
	UnrecoverableTotal    = "tandem_client_unrecoverable_decisions_total"
	WaitSeconds           = "tandem_wait_seconds"
	WaitMaxSeconds        = "tandem_wait_max_seconds"
)

var (
	descCommits = prometheus.NewDesc(CommitsTotal,
		"Global transactions committed by this process's Tandem clients, by path: local (nothing written), one-phase (one branch wrote), commit-point (decided by a database's local commit), two-phase (decided by the coordinator).",
		[]string{"path"}, nil)
	descCommitSeconds = prometheus.NewDesc(CommitSeconds,
		"Time from Tx.Commit's call to its return, for commits, by path.", []string{"path"}, nil)
	descAborts = prometheus.NewDesc(AbortsTotal,
		"Commits that ended in abort, by stage: statement (a statement failed before Commit), setup, prepare, commit, decided-abort, refused, no-coordinator, other.",
		[]string{"stage"}, nil)
	descUnknown = prometheus.NewDesc(UnknownTotal,
		"Commits whose outcome the SDK could not learn (ErrOutcomeUnknown): the coordinator or the commit point's table settles them; ask tandem status GTRID.", nil, nil)
	descFailedSeconds = prometheus.NewDesc(FailedCommitSeconds,
		"Time from Tx.Commit's call to its return, for Commits that did not commit, by outcome (aborted, unknown).", []string{"outcome"}, nil)
	descRollbacks  = prometheus.NewDesc(RollbacksTotal, "Transactions the application rolled back (Tx.Rollback).", nil, nil)
	descCoordCalls = prometheus.NewDesc(CoordinatorCallsTotal,
		"RPCs sent to the coordinators (retries and the Health probes that look for the primary included).", nil, nil)
	descUnrecoverable = prometheus.NewDesc(UnrecoverableTotal,
		"Transactions decided at a commit point while the coordinator said it could not reach one of their databases.", nil, nil)
	descWait = prometheus.NewDesc(WaitSeconds,
		"Time spent in each named wait event (see `tandem waits`), by side: client (the SDK) or coordinator.", []string{"side", "event"}, nil)
	descWaitMax = prometheus.NewDesc(WaitMaxSeconds,
		"Longest single wait of each event since the process started.", []string{"side", "event"}, nil)
)

// Collector reads one or more clients at every scrape. Counters of several
// clients are summed; wait registries shared by several clients (the
// process-wide waits.Client, the default) are counted once.
type Collector struct {
	clients []*client.Client
}

// NewCollector returns a collector of the clients' metrics.
func NewCollector(clients ...*client.Client) *Collector {
	return &Collector{clients: clients}
}

// Register registers a collector of the clients' metrics with reg. Call it
// once per registry with every client of the process (registering a
// second collector on the same registry fails: the series would collide).
func Register(reg prometheus.Registerer, clients ...*client.Client) error {
	return reg.Register(NewCollector(clients...))
}

// Describe sends every metric's description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCommits, descCommitSeconds, descAborts, descUnknown, descFailedSeconds,
		descRollbacks, descCoordCalls, descUnrecoverable, descWait, descWaitMax} {
		ch <- d
	}
}

// Collect reads the clients and sends every metric.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var sum client.Metrics
	regs := map[*waits.Registry]bool{}
	var order []*waits.Registry
	for i, cl := range c.clients {
		m := cl.Metrics()
		if i == 0 {
			sum = m
		} else {
			for p, n := range m.Committed {
				sum.Committed[p] += n
				sum.CommitLatency[p] = sum.CommitLatency[p].Plus(m.CommitLatency[p])
			}
			for s, n := range m.Aborted {
				sum.Aborted[s] += n
			}
			sum.AbortLatency = sum.AbortLatency.Plus(m.AbortLatency)
			sum.Unknown += m.Unknown
			sum.UnknownLatency = sum.UnknownLatency.Plus(m.UnknownLatency)
			sum.Rollbacks += m.Rollbacks
			sum.CoordinatorCalls += m.CoordinatorCalls
			sum.UnrecoverableDecisions += m.UnrecoverableDecisions
		}
		if m.Waits != nil && !regs[m.Waits] {
			regs[m.Waits] = true
			order = append(order, m.Waits)
		}
	}
	if len(c.clients) == 0 {
		return
	}
	for _, p := range client.CommitPaths {
		ch <- prometheus.MustNewConstMetric(descCommits, prometheus.CounterValue, float64(sum.Committed[p]), p.String())
		ch <- histogram(descCommitSeconds, sum.CommitLatency[p], p.String())
	}
	for _, s := range client.AbortStages {
		ch <- prometheus.MustNewConstMetric(descAborts, prometheus.CounterValue, float64(sum.Aborted[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(descUnknown, prometheus.CounterValue, float64(sum.Unknown))
	ch <- histogram(descFailedSeconds, sum.AbortLatency, "aborted")
	ch <- histogram(descFailedSeconds, sum.UnknownLatency, "unknown")
	ch <- prometheus.MustNewConstMetric(descRollbacks, prometheus.CounterValue, float64(sum.Rollbacks))
	ch <- prometheus.MustNewConstMetric(descCoordCalls, prometheus.CounterValue, float64(sum.CoordinatorCalls))
	ch <- prometheus.MustNewConstMetric(descUnrecoverable, prometheus.CounterValue, float64(sum.UnrecoverableDecisions))
	for _, r := range order {
		snap := r.Snapshot()
		for _, e := range snap.Events {
			ch <- histogram(descWait, e, snap.Side, e.Event.String())
			ch <- prometheus.MustNewConstMetric(descWaitMax, prometheus.GaugeValue, e.Max.Seconds(), snap.Side, e.Event.String())
		}
	}
}

// histogram is s as a Prometheus histogram: the wait events' buckets
// (waits.BucketUpperBound), in seconds, cumulative.
func histogram(d *prometheus.Desc, s waits.EventStats, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, waits.NumBuckets-1)
	var cum uint64
	for i := range waits.NumBuckets - 1 {
		cum += s.Buckets[i]
		buckets[waits.BucketUpperBound(i).Seconds()] = cum
	}
	return prometheus.MustNewConstHistogram(d, s.Count, s.Total.Seconds(), buckets, labels...)
}
