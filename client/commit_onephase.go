package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tandem-tx/tandem/waits"
)

// One phase: the transaction's single writer commits alone (PostgreSQL
// COMMIT, MariaDB/MySQL XA END + XA COMMIT … ONE PHASE), its readers
// commit locally beside it (Tx.commit); no prepare, no decision record, no
// coordinator call.

// commitOnePhase commits w, the only writer. The database's refusal is an
// abort (w rolled back); a broken call, or an error that ended the session
// (sessionEnded: it can come after the commit ran), is an unknown outcome,
// never rolled back.
func (t *Tx) commitOnePhase(ctx context.Context, w *Branch) (Result, txState, error) {
	res := Result{Path: PathOnePhase}
	dctx, sp := t.decisionSpan(ctx, "one-phase", w.rm.name)
	err := w.execSteps(dctx, waits.RMCommit, w.onePhaseSQL())
	endSpan(sp, err)
	if err == nil {
		w.state = branchCommitted
		return res, txCommitted, nil
	}
	if serverSaidNo(err) && !sessionEnded(err) {
		t.abortAll(ctx, []*Branch{w})
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("one-phase commit on %q failed", w.rm.name), Cause: err, stage: stageCommit}
	}
	// The commit may or may not have reached the database.
	return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf("rm %q: one-phase commit: %w", w.rm.name, err)}
}

// sessionEnded reports whether err is the server ending the session or
// interrupting the statement rather than refusing it: PostgreSQL's FATAL or
// PANIC (57P01 comes once a terminated backend's commit is done),
// MySQL/MariaDB's "connection was killed" (1927), "query execution was
// interrupted" (1317), "server shutdown in progress" (1053) and MySQL's
// "session was killed" (3169). A COMMIT answered so may have run.
func sessionEnded(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		sev := pgErr.SeverityUnlocalized
		if sev == "" {
			sev = pgErr.Severity
		}
		return sev == "FATAL" || sev == "PANIC"
	}
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) {
		switch myErr.Number {
		case 1053, 1317, 1927, 3169:
			return true
		}
	}
	return false
}
