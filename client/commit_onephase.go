package client

import (
	"context"
	"fmt"

	"github.com/tandem-tx/tandem/waits"
)

// One phase: the transaction's single writer commits alone (PostgreSQL
// COMMIT, MariaDB/MySQL XA END + XA COMMIT … ONE PHASE), its readers
// commit locally beside it (Tx.commit); no prepare, no decision record, no
// coordinator call.

// commitOnePhase commits w, the only writer. The database's refusal is an
// abort (w rolled back); a broken call is an unknown outcome, never rolled
// back.
func (t *Tx) commitOnePhase(ctx context.Context, w *Branch) (Result, txState, error) {
	res := Result{Path: PathOnePhase}
	dctx, sp := t.decisionSpan(ctx, "one-phase", w.rm.name)
	err := w.execSteps(dctx, waits.RMCommit, w.onePhaseSQL())
	endSpan(sp, err)
	if err == nil {
		w.state = branchCommitted
		return res, txCommitted, nil
	}
	if serverSaidNo(err) {
		t.abortAll(ctx, []*Branch{w})
		return res, txAborted, &AbortedError{GTRID: t.gtrid, Reason: fmt.Sprintf("one-phase commit on %q failed", w.rm.name), Cause: err, stage: stageCommit}
	}
	// The commit may or may not have reached the database.
	return res, txUnknown, &OutcomeUnknownError{GTRID: t.gtrid, Cause: fmt.Errorf("rm %q: one-phase commit: %w", w.rm.name, err)}
}
