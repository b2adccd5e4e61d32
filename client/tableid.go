package client

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Every RM that may be a commit point or hold a prepared branch under one
// has a decision table with an id (docs/ownership.md): the commit point's
// own branch and the branches prepared under it are named with the commit
// point's id (their owner), the decision row lists each participant's id,
// and every statement that writes or reads a decision names the id it
// expects, which the database compares. The client reads each RM's id once
// and keeps it; whether a MariaDB table checks that id itself (its foreign
// key) it reads again every selfCheckTTL.

// idState is what a client knows of one RM's decision-table id.
type idState struct {
	mu          sync.Mutex
	id          xid.Owner // zero: not known
	selfChecked bool      // the table checks id itself (decision.ReadIDChecked)
	flagAt      time.Time // when selfChecked was last read (a completed reading)
	rereadAt    time.Time // when a reading again last began (one at a time)
	refused     bool      // a table refused the checked form: never again in this process
	err         error     // the last failure to read it
	checked     time.Time // when err was met
}

// selfCheckTTL is how long a reading of selfChecked stands before a
// branch's begin reads it again (one query a minute per RM, on one
// transaction's connection before its begin).
const selfCheckTTL = time.Minute

// idRetry is how long a failure to read an id is kept before trying again.
const idRetry = 5 * time.Second

// tableID returns info's decision-table id, reading it (once) through conn
// (the application's connection, outside any transaction: the id is the
// one of the table its branches reach) when given, else through info's
// pool, else failing.
func (c *Client) tableID(ctx context.Context, info *rmInfo, conn rowReader) (xid.Owner, error) {
	s := &info.id
	s.mu.Lock()
	id, err, checked := s.id, s.err, s.checked
	reread := !id.IsZero() && conn != nil && info.dialect.Driver() == rm.MySQL && !s.refused &&
		time.Since(s.flagAt) >= selfCheckTTL && time.Since(s.rereadAt) >= selfCheckTTL
	if reread {
		s.rereadAt = time.Now() // this caller reads it; the others go on
	}
	s.mu.Unlock()
	if reread {
		rereadSelfCheck(ctx, info, conn, id)
	}
	if !id.IsZero() {
		return id, nil
	}
	if err != nil && time.Since(checked) < idRetry {
		return xid.Owner{}, err
	}
	q := conn
	if q == nil && info.db != nil {
		q = sqlReader{info.db}
	}
	if q == nil {
		if err == nil {
			err = fmt.Errorf("rm %q: its decision-table id is not known yet, and there is no client.RM.DB to read it with", info.name)
		}
		return xid.Owner{}, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	id, tableChecked, err := readTableIDChecked(ctx, q, info.dialect.Driver())
	if err != nil {
		err = fmt.Errorf("rm %q: %w", info.name, err)
	}
	s.mu.Lock()
	s.id, s.selfChecked, s.err, s.checked, s.flagAt = id, tableChecked, err, time.Now(), time.Now()
	s.mu.Unlock()
	return id, err
}

// rereadSelfCheck reads again, through conn, whether info's MariaDB table
// checks its own id (a table can lose its reference: a copy made with
// CREATE TABLE … LIKE, an online schema change). The known id is never
// replaced: a table that answers another one is another table, which the
// subquery form refuses (decision.RefusedWrongTable). A failed reading
// counts as no reference until the next: the subquery form is checked by
// the database whatever the table has.
//
// It reads only on a session in autocommit mode and outside a transaction
// (a table-less SELECT first, which opens none): the reading itself would
// otherwise open a transaction on the application's session, and its XA
// START would fail. Such a session counts as no reference.
func rereadSelfCheck(ctx context.Context, info *rmInfo, conn rowReader, known xid.Owner) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var autocommit, inTx int64
	err := conn.readRow(ctx, "SELECT @@autocommit, @@in_transaction", &autocommit, &inTx)
	checked := false
	if err == nil && autocommit == 1 && inTx == 0 {
		var id xid.Owner
		id, checked, err = readTableIDChecked(ctx, conn, rm.MySQL)
		checked = checked && err == nil && id == known
	}
	s := &info.id
	s.mu.Lock()
	defer s.mu.Unlock()
	s.selfChecked = checked && !s.refused
	s.flagAt = time.Now()
}

// tableChecked reports whether info's decision table was read to check its
// id itself (decision.Commit.TableChecked).
//
// A reading stands for selfCheckTTL, after which a branch's begin reads it
// again (tableID); one older than twice that (nothing read it again) no
// longer counts.
func (info *rmInfo) tableChecked() bool {
	info.id.mu.Lock()
	defer info.id.mu.Unlock()
	return info.id.selfChecked && time.Since(info.id.flagAt) < 2*selfCheckTTL
}

// forgetTableChecked makes later decisions at info check its id through the
// id table again: a table refused the checked form (another table, one
// that lost its reference, or a session with foreign-key checks off), and
// the subquery form says which, or works.
//
// For the rest of the process: a reading again does not undo it (the
// catalog still lists the key while a pool's sessions run with
// foreign_key_checks = 0, and each would be refused again).
func (info *rmInfo) forgetTableChecked() {
	info.id.mu.Lock()
	info.id.selfChecked, info.id.refused = false, true
	info.id.mu.Unlock()
}

// knownTableID returns info's id if it was read, without reading it.
func (info *rmInfo) knownTableID() xid.Owner {
	info.id.mu.Lock()
	defer info.id.mu.Unlock()
	return info.id.id
}

// readTableID reads the id of the decision table q reaches (as
// decision.ReadID, through a rowReader).
func readTableID(ctx context.Context, q rowReader) (xid.Owner, error) {
	var s string
	err := q.readRow(ctx, "SELECT id FROM "+decision.IDTableName, &s)
	if err != nil {
		if isNoRows(err) {
			return xid.Owner{}, fmt.Errorf("%w (%s has no row)", decision.ErrNoID, decision.IDTableName)
		}
		return xid.Owner{}, fmt.Errorf("read the decision-table id from %s (%w): run `tandem init-rm` on it, or give client.RM.DB, which creates it", decision.IDTableName, err)
	}
	return parseTableID(s)
}

// parseTableID is the id read from the id table, or why it is not one.
func parseTableID(s string) (xid.Owner, error) {
	o, err := xid.ParseOwner(s)
	if err != nil {
		return xid.Owner{}, fmt.Errorf("the id in %s is not an id (%w): the table was written by something else; inspect it", decision.IDTableName, err)
	}
	return o, nil
}

// readTableIDChecked reads, in one statement, the id of the decision table
// q reaches and whether that table checks the id itself
// (decision.ReadIDChecked, through a rowReader).
func readTableIDChecked(ctx context.Context, q rowReader, d rm.Driver) (xid.Owner, bool, error) {
	var s string
	var n int
	if err := q.readRow(ctx, decision.IDCheckedQuery(d), &s, &n); err != nil {
		// A server without the catalog it reads (MySQL before 8.0.16), or
		// no id at all: the plain read says which.
		id, err := readTableID(ctx, q)
		return id, false, err
	}
	o, err := parseTableID(s)
	return o, n == 1 && err == nil, err
}

func isNoRows(err error) bool {
	return errors.Is(err, sql.ErrNoRows)
}
