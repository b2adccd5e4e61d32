// Package testhook holds switches that only tests set, to reach what the
// SDK's own checks otherwise stop first (to show what the database itself
// enforces behind them). Production code never sets them.
package testhook

import "sync/atomic"

// SkipStatementChecks makes the Go SDK, when true, send an application's
// statement without its early text checks (the MariaDB implicit-commit
// classifier, PostgreSQL's transaction-control refusal). What the
// databases and the SDK's checks after each statement enforce still holds.
var SkipStatementChecks atomic.Bool
