// Package waits is Tandem's wait-event interface: every place where Tandem
// blocks is a named, timed event with a count, a total, a maximum and a
// latency histogram, in the coordinator and in the SDK alike
// (docs/architecture.md, "Wait events"; docs/field-reports.md: every field
// report found its problem by reading named waits).
//
// It is public so that SDK users can hand a client its own Registry
// (client.Config.Waits), trace a transaction (client.Tx.SetTrace) and read
// the JSON that a coordinator's /waits and `tandem bench --json` write
// (JSONSnapshot, JSONTrace). How the coordinator sends a traced Commit's
// waits back to the client is a protocol detail kept in internal/waitwire.
//
// # Events
//
// An Event is a small integer naming one kind of wait. The built-in ones:
//
//	event                     side         what is timed (one wait = one of these)
//	log file sync             coordinator  a committer waiting for its decision record to be durable (Append returning)
//	log file parallel write   coordinator  the log writer's write(2) of one batch
//	log file fdatasync        coordinator  the log writer's fdatasync of one batch
//	log space throttle        coordinator  a committer held back by admission control (log past 80% full)
//	standby sync ack          coordinator  a commit waiting for the standby's acknowledgement (SYNC transport)
//	standby log write         coordinator  the standby writing and syncing a shipped batch
//	rm roundtrip              client       one statement round trip of a branch (the first carries the begin)
//	rm prepare                both         phase 1 of one branch (PREPARE TRANSACTION; XA END+XA PREPARE)
//	rm commit                 client       a one-phase or read-only local commit of one branch
//	rm rollback               client       a client-side rollback of one branch
//	rm commit prepared        both         COMMIT PREPARED / XA COMMIT of one prepared branch
//	rm rollback prepared      both         ROLLBACK PREPARED / XA ROLLBACK of one prepared branch
//	rm recover scan           coordinator  one in-doubt scan of one RM (pg_prepared_xacts, XA RECOVER)
//	coordinator commit        client       one Commit RPC, as the client sees it
//	coordinator commit        coordinator  handling one Commit: decision and, with visibility sync, phase 2
//	coordinator abort         client       one Abort RPC (handing prepared branches over)
//	coordinator status        client       one Status RPC
//
// The built-in events are defined here; the coordinator records its own, the
// SDK (package client) its own. Define adds an event of a new name at init
// time.
//
// # Registries and sides
//
// A Registry holds one side's totals. Each coordinator has its own, passed
// to its decision log, resource-manager connections and standby link in
// their options and served at its admin listener's /waits, so that two
// coordinators in one process (a primary and its standby started by
// `tandem bench`, say) keep their tables apart. The SDK records into Client,
// the one process-wide registry, unless a client.Config names another.
//
// Recording one wait costs four uncontended atomic adds and no allocation
// (BenchmarkRecord):
//
//	reg := waits.NewRegistry(waits.SideCoordinator)
//	start := time.Now()
//	err := f.Sync()
//	reg.Since(waits.LogFileSync, start)
//
// or, where the wait belongs to one global transaction and should also go
// into that transaction's trace when one is open:
//
//	reg.SinceTx(waits.RMCommitPrepared, start, gtrid, "pg")
//
// # Histograms
//
// Each event's histogram has NumBuckets fixed buckets: bucket i counts waits
// of at most 2^i microseconds (1 µs, 2 µs, 4 µs, … 2^25 µs ≈ 33.6 s), inclusive
// as Prometheus's "le"; the last bucket counts everything longer.
//
// # Traces
//
// A Trace is the sequence of waits of one global transaction with their
// timestamps, like a database's session trace. On the client it is carried by
// the transaction (client.Tx.SetTrace); on the coordinator a trace is opened
// per gtrid (Registry.StartTrace) when a client asks for one, and SinceTx
// appends to it. With no trace open, SinceTx costs one atomic load more than
// Since; the SDK's check is a nil pointer test.
package waits
