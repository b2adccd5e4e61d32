package client

import (
	"context"
	"time"

	"github.com/tandem-tx/tandem/waits"
)

// Phase 2, shared by the commit point's path and the coordinator's: the
// prepared branches are committed (or rolled back) after the decision.

// settlePrepared commits (or rolls back) prepared branches on their own
// connections, in parallel, after the decision. A branch it cannot settle
// is left to a recoverer (a session-bound one has its session closed so
// that others can). It reports whether all were settled.
func (t *Tx) settlePrepared(ctx context.Context, bs []*Branch, commit bool) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := parallel(len(bs), func(i int) error {
		b := bs[i]
		stmt, ev := b.rm.dialect.RollbackPrepared(b.id), waits.RMRollbackPrepared
		if commit {
			stmt, ev = b.rm.dialect.CommitPrepared(b.id), waits.RMCommitPrepared
		}
		sctx, sp := t.startSpan(ctx, SpanPhase2, b.rm.name)
		if t.rec {
			sp.SetAttributes(AttrAction.String(action(commit)))
		}
		err := b.execSteps(sctx, ev, []string{stmt})
		if err != nil && b.rm.dialect.IsNotFound(err) {
			err = nil // settled already
		}
		endSpan(sp, err)
		if err != nil {
			if b.rm.dialect.SessionBound() {
				b.releaseSession()
			}
			b.state = branchHandedOver
			return err
		}
		if commit {
			b.state = branchCommitted
		} else {
			b.state = branchRolledBack
		}
		return nil
	})
	return err == nil
}

// settleOwn commits (or rolls back) the prepared branches the client
// settles (session-bound ones, and any it named client_settles) on their
// own connections, in parallel, after the decision. A branch it cannot
// settle is the coordinator's (a session-bound one has its connection
// closed so that the coordinator can). It reports whether every one was
// settled here.
func (t *Tx) settleOwn(ctx context.Context, writers []*Branch, commit bool) bool {
	var own []*Branch
	for _, b := range writers {
		if b.clientSettles || b.rm.dialect.SessionBound() {
			own = append(own, b)
		} else {
			b.state = branchHandedOver
		}
	}
	return t.settlePrepared(ctx, own, commit)
}

// releaseOwn closes the sessions holding session-bound prepared branches.
func (t *Tx) releaseOwn(writers []*Branch) {
	for _, b := range writers {
		if b.rm.dialect.SessionBound() {
			b.releaseSession()
		}
		b.state = branchHandedOver
	}
}

// anyClientSettles reports whether the client settles one of bs itself.
func anyClientSettles(bs []*Branch) bool {
	for _, b := range bs {
		if b.clientSettles || b.rm.dialect.SessionBound() {
			return true
		}
	}
	return false
}

// action is the tandem.action of a phase-2 span.
func action(commit bool) string {
	if commit {
		return "commit"
	}
	return "rollback"
}
