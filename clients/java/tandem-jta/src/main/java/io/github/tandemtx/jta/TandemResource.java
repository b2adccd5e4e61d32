package io.github.tandemtx.jta;

import javax.transaction.xa.XAResource;

/**
 * An {@link XAResource} that knows which Tandem resource manager it is a
 * branch on. {@link TandemTransaction#enlistResource} accepts only these: the
 * branch's XID is {@link TandemXid} (bqual = {@link #rmName()}), so the
 * coordinator can settle it by name. {@link TandemDataSource} makes them; an
 * application rarely touches one directly.
 *
 * <p>The implementations here issue SQL on one JDBC connection
 * ({@code BEGIN}/{@code PREPARE TRANSACTION 'tandem2:…'} on PostgreSQL,
 * {@code XA START/END/PREPARE '<gtrid>','<owner><rm>',1413566002} on
 * MariaDB: {@link TandemXid}'s owned names),
 * because pgjdbc's own {@code PGXAResource} names branches in a format the
 * coordinator's recovery does not scan.
 *
 * <p>The interface is sealed: a branch's name, and whether it is its
 * transaction's commit point, are decided before it begins, which only the
 * implementations here know how to do.
 */
public sealed interface TandemResource extends XAResource permits SqlBranch {
    /** The resource manager's name as configured in the coordinator ({@code --rm NAME=...}). */
    String rmName();

    /**
     * True when a prepared branch stays bound to the session that prepared it
     * (MariaDB): it is then committed on that session right after the
     * decision ({@code client_settles} in the Commit call), and the session
     * is closed if it cannot, which hands the branch to the coordinator.
     */
    boolean sessionBound();

    /**
     * Reports whether the active branch wrote nothing, so it can commit locally
     * and stay out of two-phase commit. False when the database cannot tell
     * cheaply (MariaDB): the branch then counts as a writer.
     */
    boolean readOnly() throws javax.transaction.xa.XAException;

    /**
     * Ends the branch's session without ending the branch, by aborting its
     * connection (never giving it back to a pool): the database rolls back
     * an active branch, detaches a session-bound prepared one for the
     * coordinator to settle, and no later borrower of a pooling source sees
     * the session.
     */
    void releaseSession();

    /**
     * Called once the global transaction is over (committed, rolled back or
     * handed to the coordinator): the connection goes back to its pool, or is
     * discarded when it was released or broken.
     */
    void completed();
}
