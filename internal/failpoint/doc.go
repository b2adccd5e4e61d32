// Package failpoint lets tests crash, fail or slow the coordinator at named
// steps of the commit path. It is compiled in only with the build tag
// "failpoints"; in release builds Inject is an empty function the compiler
// removes.
//
// With the tag, TANDEM_FAILPOINTS configures it at start:
//
//	TANDEM_FAILPOINTS='after-commit-record=kill;before-phase2=sleep(500ms)'
//
// Actions: kill (SIGKILL to this process: nothing after it runs, as with
// kill -9), kill-after(DURATION) (carry on, SIGKILL after DURATION), error
// (Inject returns an error), sleep(DURATION).
//
// Set and SetHook arm failpoints from a test (or a test's child process)
// instead of the environment; a hook runs a function at the step, such as
// copying the data directory to see what a crash there would leave.
//
// Names in use:
//
//   - client (the SDK, in the application's process): before-prepare,
//     after-prepare (each branch), before-commit-rpc, after-commit-rpc;
//   - commit path (internal/coord): before-commit-record, after-commit-record,
//     before-phase2, before-phase2-call, after-phase2-call (each branch),
//     after-phase2, before-end, after-end;
//   - decision log writes (internal/wal): wal-before-write, wal-after-write
//     (around the write of every batch, by the writer or by a direct
//     Append; an error fails the log as a failed write does);
//   - segment rotation and reuse (internal/wal): wal-rotate-before-rename,
//     wal-rotate-after-rename (around the rename of the next segment into
//     place), wal-recycle-after-rename (a released file renamed to the next
//     segment's temporary name, before its header is written),
//     wal-release-before-rename, wal-release-after-rename (Release: before
//     the first rename of a released segment, after the last one and before
//     the directory fsync);
//   - standby shipping (internal/standby): standby-before-ship (a RECORDS
//     frame of the sync/async stream built, not yet sent) on the primary;
//     standby-before-final-state (the primary's final STATE read, not yet
//     recorded) on the standby;
//   - checkpoint (internal/coord): checkpoint-after-carry (the surviving
//     decisions appended again, not yet synced), checkpoint-before-release
//     (synced), checkpoint-after-release.
package failpoint
