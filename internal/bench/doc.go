// Package bench holds the workloads behind `tandem bench` (the tandem-bench
// program, cmd/tandem-bench; tandem itself must not import it). Each runs in
// this process, against the disk or the databases at hand, and returns a
// report that the command prints as a table or as JSON.
//
// Log (logbench.go) measures the decision log: the disk's own
// write+fdatasync latency, then internal/wal at rising numbers of
// concurrent committers, in immediate and batch write mode.
package bench
