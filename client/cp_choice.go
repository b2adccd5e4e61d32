package client

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

	"github.com/tandem-tx/tandem/internal/decision"
	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// Which branch is the commit point, and which RMs can be one: chosen at
// a MariaDB/MySQL branch's begin (beginForm) or at Commit (commitPoint);
// an RM qualifies when its decision table exists, has an id, and its
// database makes commits durable (checked on first use and cached).

// beginForm says how a MariaDB/MySQL branch begins: as the transaction's
// commit point (its own XA branch, never prepared), or as an XA branch named
// with the commit point the transaction already has — that branch, or a
// PostgreSQL branch pinned as the commit point when this RM cannot be one —
// or with none (the coordinator decides). Called once per branch, before
// its begin is sent.
func (t *Tx) beginForm(ctx context.Context, b *Branch) {
	if b.rm.dialect.Driver() != rm.MySQL {
		return
	}
	t.mu.Lock()
	decideAt := t.opts.DecideAt
	t.mu.Unlock()
	plainOK := decideAt != DecideAtCoordinator && t.c.qualifies(ctx, b.rm, b.reader())
	var pin *Branch
	if !plainOK && decideAt != DecideAtCoordinator {
		pin = t.postgresCandidate(ctx)
	}
	if t.decidedByCoordinator(b, plainOK, pin) && t.c.coords != nil {
		// Named after the coordinator's cluster at XA START. Unknown (the
		// coordinator unreachable): named with no owner, and refused at
		// Commit if the coordinator must decide (ownByCluster).
		b.id.Owner, _ = t.c.clusterID(ctx)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.cp != nil:
		b.id.CommitPoint, b.id.Owner = t.cp.rm.name, t.cp.rm.knownTableID()
	case t.unnamedXA:
	case plainOK:
		t.cp, b.selfCP = b, true
		b.id = xid.CommitPointSelf(t.gtrid, b.rm.name, b.rm.knownTableID())
	case pin != nil:
		t.cp = pin
		b.id.CommitPoint, b.id.Owner = pin.rm.name, pin.rm.knownTableID()
	default:
		t.unnamedXA = true
	}
}

// decidedByCoordinator reports whether b, a MariaDB/MySQL branch about to
// begin, will be named with no commit point (beginForm's last case).
func (t *Tx) decidedByCoordinator(b *Branch, plainOK bool, pin *Branch) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cp == nil && (t.unnamedXA || !plainOK && pin == nil)
}

// postgresCandidate returns the enlisted PostgreSQL branch that would be
// the commit point (the qualifying RM of highest strength, then the first
// enlisted), checking RMs not checked yet.
func (t *Tx) postgresCandidate(ctx context.Context) *Branch {
	t.mu.Lock()
	bs := append([]*Branch(nil), t.branches...)
	t.mu.Unlock()
	var best *Branch
	for _, w := range bs {
		if w.rm.dialect.Driver() != rm.Postgres || w.rm.neverCP {
			continue
		}
		ok := w.rm.cp.known()
		switch {
		case ok:
		case w.mu.TryLock():
			// Idle, the check may use its connection (outside any
			// transaction); busy, another goroutine runs a statement on
			// it: never wait for it here.
			if w.state == branchIdle {
				ok = t.c.qualifies(ctx, w.rm, w.reader())
			}
			w.mu.Unlock()
		}
		if ok && (best == nil || w.rm.cpStrength > best.rm.cpStrength) {
			best = w
		}
	}
	return best
}

// checkPostgres learns, before a PostgreSQL branch begins, whether its RM
// qualifies (the check cannot run inside the application's transaction: a
// missing table would abort it).
func (t *Tx) checkPostgres(ctx context.Context, b *Branch) {
	if b.rm.dialect.Driver() != rm.Postgres || b.rm.neverCP {
		return
	}
	t.mu.Lock()
	decideAt := t.opts.DecideAt
	t.mu.Unlock()
	if decideAt != DecideAtCoordinator {
		t.c.qualifies(ctx, b.rm, b.reader())
	}
}

// commitPoint picks the commit point among the writers, or nil when the
// coordinator decides. A commit point chosen at a MySQL branch's begin (its
// own XA branch, or a pinned PostgreSQL branch that XA branches are named
// with) is kept, whether it wrote or not.
func (t *Tx) commitPoint(writers []*Branch) *Branch {
	t.mu.Lock()
	cp, unnamed, decideAt := t.cp, t.unnamedXA, t.opts.DecideAt
	t.mu.Unlock()
	if cp != nil {
		return cp
	}
	if decideAt == DecideAtCoordinator || unnamed {
		return nil
	}
	var best *Branch
	for _, w := range writers {
		if w.rm.dialect.Driver() != rm.Postgres {
			return nil // an XA branch named with no commit point
		}
		if w.rm.cp.known() && !w.rm.neverCP && (best == nil || w.rm.cpStrength > best.rm.cpStrength) {
			best = w
		}
	}
	if best == nil && decideAt == DecideAtRM {
		t.c.warn("decide-at rm: no writer of the transaction can be its commit point; the coordinator decides", "gtrid", t.gtrid.String())
	}
	return best
}

// cpState is what a client knows of one RM as a commit point.
type cpState struct {
	mu        sync.Mutex
	checked   time.Time // zero: never checked
	why       error     // nil: qualifies
	transient bool      // why may pass by itself: checked again after cpRetry
	// forget holds gtrids whose branches are all committed: their 'C' rows
	// are deleted by a later commit on this RM, in the same round trip.
	forget     []xid.GTRID
	forgetAt   []time.Time // when each of forget was queued
	forgetting bool        // a background delete runs (forgetRows)
}

// known reports whether the RM was checked and qualifies.
func (s *cpState) known() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.checked.IsZero() && s.why == nil
}

// cpRecheck is how long a negative eligibility answer is kept.
const cpRecheck = time.Minute

// cpRetry is how long a transient failure of the checks (the database not
// reachable) is kept.
const cpRetry = 5 * time.Second

// qualifies reports whether info can be a commit point, checking when it
// has not yet (or when a negative answer is older than cpRecheck, or a
// transient one older than cpRetry). conn is the branch's connection,
// outside any transaction, or nil when it cannot be used now: the checks
// run on the RM's pool when there is one (the application's connection is
// left alone, but for comparing what it and the pool reach), else on conn.
func (c *Client) qualifies(ctx context.Context, info *rmInfo, conn rowReader) bool {
	if info.neverCP {
		return false
	}
	s := &info.cp
	s.mu.Lock()
	checked, why, transient := s.checked, s.why, s.transient
	s.mu.Unlock()
	wait := cpRecheck
	if transient {
		wait = cpRetry
	}
	if !checked.IsZero() && (why == nil || time.Since(checked) < wait) {
		return why == nil
	}
	if conn == nil && info.db == nil {
		return false // nothing to check with now; not cached
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why, transient = c.checkCommitPoint(ctx, info, conn)
	s.mu.Lock()
	s.checked, s.why, s.transient = time.Now(), why, transient
	s.mu.Unlock()
	if why != nil {
		c.warn("resource manager cannot be a commit point; its branches are prepared and another branch or the coordinator decides (checked again later)",
			"rm", info.name, "why", why.Error())
	}
	return why == nil
}

// checkCommitPoint says why info cannot be a commit point (nil: it can),
// and whether that may pass by itself (a failed connection, say).
func (c *Client) checkCommitPoint(ctx context.Context, info *rmInfo, conn rowReader) (why error, transient bool) {
	d := info.dialect.Driver()
	q := conn
	if info.db != nil {
		q = sqlReader{info.db}
		if err := decision.Ensure(ctx, info.db, d); err != nil {
			return err, !isDefinite(err)
		}
		if conn != nil {
			// Taking the key through the pool must hit the table the
			// branches' commits write: the same database, server, table.
			a, err := tableIdentity(ctx, conn, d)
			if err != nil {
				return fmt.Errorf("rm %q: identify the decision table through the application's connection: %w", info.name, err), !isDefinite(err)
			}
			b, err := tableIdentity(ctx, q, d)
			if err != nil {
				return fmt.Errorf("rm %q: identify the decision table through client.RM.DB: %w", info.name, err), !isDefinite(err)
			}
			if a != b {
				return fmt.Errorf("rm %q: client.RM.DB reaches another decision table than the application's connections (%s against %s): "+
					"give it a pool on the same database and user, or no pool", info.name, b, a), false
			}
		}
	}
	if err := decision.CheckDurableRead(ctx, q.readRow, d); err != nil {
		return err, !isDefinite(err)
	}
	var g string
	if err := q.readRow(ctx, "SELECT gtrid FROM "+decision.TableName+" WHERE 1 = 0", &g); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("rm %q: the decision table %s is not usable (%w): start the coordinator with this RM (it creates the table), run tandem init-rm, or give client.RM.DB", info.name, decision.TableName, err), !isDefinite(err)
	}
	// Its id names the commit point's branches (their owner) and is
	// checked by every statement that writes or reads its decisions.
	id, err := c.tableID(ctx, info, conn)
	if err != nil {
		return err, !isDefinite(err)
	}
	if info.db != nil && conn != nil {
		// The pool takes keys and forgets rows: its table must be the one
		// the application's connections reach, by the tables' own ids.
		pid, err := readTableID(ctx, sqlReader{info.db})
		if err != nil {
			return fmt.Errorf("rm %q: read the decision-table id through client.RM.DB: %w", info.name, err), !isDefinite(err)
		}
		if pid != id {
			return fmt.Errorf("rm %q: client.RM.DB reaches decision table %s, the application's connections %s (another schema, database or server): "+
				"give it a pool on the same database and user, or no pool", info.name, pid, id), false
		}
	}
	return nil, false
}

// isDefinite reports whether err is an answer (the database's, or a
// verdict on its settings), as opposed to a failed connection or a timeout,
// which may pass by itself.
func isDefinite(err error) bool {
	var netErr net.Error
	switch {
	case serverSaidNo(err):
		return true
	case errors.As(err, &netErr), errors.Is(err, driver.ErrBadConn), errors.Is(err, mysql.ErrInvalidConn),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return false
	}
	return true
}

// tableIdentity names what q reaches as the decision table: database,
// server and the table's own identity.
func tableIdentity(ctx context.Context, q rowReader, d rm.Driver) (string, error) {
	query := "SELECT concat_ws('/', current_database(), coalesce(inet_server_addr()::text, 'local'), inet_server_port()::text, pg_postmaster_start_time()::text, " +
		"coalesce(to_regclass('" + decision.TableName + "')::oid::text, 'none'))"
	if d == rm.MySQL {
		query = "SELECT concat_ws('/', DATABASE(), @@hostname, @@port, @@server_id, " +
			"(SELECT coalesce(create_time, '') FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '" + decision.TableName + "'))"
	}
	var id string
	if err := q.readRow(ctx, query, &id); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", err
	}
	return id, nil
}

// rowReader is a connection as the commit point's checks use it: the
// application's (database/sql or pgx) or the RM's pool.
type rowReader interface {
	// readRow reads the first row of query into dest; with no row, an
	// error matching sql.ErrNoRows.
	readRow(ctx context.Context, query string, dest ...any) error
}

// sqlReader reads through database/sql (*sql.DB or *sql.Conn).
type sqlReader struct {
	q interface {
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
}

func (r sqlReader) readRow(ctx context.Context, query string, dest ...any) error {
	return r.q.QueryRowContext(ctx, query).Scan(dest...)
}

// pgxReader reads through a pgx connection (pgx.ErrNoRows matches sql.ErrNoRows).
type pgxReader struct{ c *pgx.Conn }

func (r pgxReader) readRow(ctx context.Context, query string, dest ...any) error {
	return r.c.QueryRow(ctx, query).Scan(dest...)
}
