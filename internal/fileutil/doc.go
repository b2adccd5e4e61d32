// Package fileutil holds the file operations the log, the coordinator, the
// standby and the benchmark share, defined once: fdatasync, an exclusive
// advisory lock, a directory fsync, a durable small-file write. Like etcd's
// client/pkg/fileutil.
//
// Guarantees: Fdatasync returns only once the file's data (and the
// metadata needed to read it) is on stable storage, retrying EINTR; SyncDir
// makes the entries created or renamed in a directory survive a crash;
// WriteFileDurably leaves either the old file or the whole new one, never a
// part; TryLock never blocks.
package fileutil
