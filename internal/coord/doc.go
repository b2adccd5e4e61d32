// Package coord decides global transactions and sees every decision through.
//
// The rules it keeps:
//
//   - The COMMIT record in the decision log is the commit point. Commit
//     answers COMMITTED only after that record is durable.
//   - The first of COMMIT or ABORT to reach the log wins, always: a Commit
//     that arrives after an ABORT answers ABORTED, an Abort after a COMMIT is
//     refused, and a repeated call answers the first call's outcome.
//   - Phase 2 runs from the coordinator's own connections, in parallel across
//     resource managers, retried with backoff until each acknowledges; "no such
//     prepared branch" after a restart means it was already done. Then an END
//     record.
//   - Recovery: at start the log is replayed and every decision without END
//     is driven again. Periodically and at start every resource manager is
//     scanned for prepared branches in Tandem's format; one with no decision
//     that stays prepared past the orphan timeout is aborted — the ABORT
//     record is written durably first, then the branch is rolled back.
//   - Presumed abort: a gtrid the coordinator has no record of was never
//     committed.
//   - The decision log is circular, Options.LogSize in all (checkpoint.go):
//     a checkpoint writes every decision still remembered whose record is
//     in an old segment again (a CHECKPOINT record) and releases those
//     segments for reuse, so disk use stays flat and a restart replays only
//     the live segments. Admission control (admit.go) throttles new
//     COMMITs past 80% of the log and refuses them with ErrLogFull when no
//     room is left, naming what holds the log; so are the ABORTs a caller
//     can cause with no branch prepared (Abort of an undecided gtrid, a
//     Commit of a too-old gtrid). The in-doubt scan's ABORTs, END and
//     CHECKPOINT records are always written, and the log frees itself once
//     phase 2 catches up.
//
// Decided transactions are remembered in memory while phase 2 runs and for a
// while after: ABORTs for MaxTxnAge (so that a very late Commit still answers
// ABORTED; a Commit for a gtrid older than MaxTxnAge is aborted outright),
// finished COMMITs for EndedRetention (so that a retried Commit answers
// quickly; after that a retry is decided again and finds every branch
// already committed, which is still the right answer).
package coord
