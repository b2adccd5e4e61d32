package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ServerBuilder;
import java.sql.Connection;
import java.sql.Statement;
import java.time.Duration;
import java.util.List;
import javax.transaction.xa.XAException;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Who owns a branch, and what the client believes about a decision: the
 * coordinator's cluster (from Health) names the branches it decides; a
 * vanished decision row is an unknown outcome, never an abort; "no such
 * prepared transaction" is believed only from a connection that reaches the
 * RM's own decision table.
 */
class OwnerTest {
    static final String CLUSTER = "0123456789abcdef0123456789abcdef";

    @BeforeAll
    static void tables() throws Exception {
        TestEnv.createTables();
        try (Coordinator c = new Coordinator(null)) {
            // a coordinator's start makes the decision tables and their ids
        }
    }

    @AfterEach
    void noHook() {
        DecisionTable.betweenKeyAndRead = null;
    }

    /**
     * A coordinator whose Health names cluster=CLUSTER decides: the MariaDB
     * branch is begun as '<g>','<CLUSTER>maria',TAN2 and committed on its
     * session under that name; the PostgreSQL branch is prepared as
     * tandem2:<g>:pg:<CLUSTER> (the fake coordinator leaves it: rolled back
     * here).
     */
    @Test
    void coordinatorDecidedBranchesCarryTheClusterFromHealth() throws Exception {
        FollowTest.RoleFake fake = new FollowTest.RoleFake(true, 1, true, CLUSTER);
        fake.server = ServerBuilder.forPort(0).addService(fake).build().start();
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(fake.addr())
                        .withDecideAt(TandemConfig.DecideAt.COORDINATOR).withDecisionTimeout(Duration.ofSeconds(5)));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = CommitPointTest.writeBoth(tm, pg, maria, id);
            TandemTransaction tx = (TandemTransaction) tm.getTransaction();
            TandemXid mx = ((SqlBranch) tx.resourceFor("maria")).xid;
            assertEquals(CLUSTER, mx.owner());
            assertEquals("'" + g + "','" + CLUSTER + "maria'," + TandemXid.OWNED_FORMAT_ID, mx.mysqlXid());
            tm.commit();
            assertTrue(TestEnv.mariaHas(id), "the MariaDB branch committed on its session under its owned name");
            assertEquals(List.of("pg tandem2:" + g + ":pg:" + CLUSTER), TestEnv.prepared(g), "PostgreSQL prepared under the cluster's name");
            try (Connection c = TestEnv.pg(); Statement st = c.createStatement()) {
                st.execute("ROLLBACK PREPARED 'tandem2:" + g + ":pg:" + CLUSTER + "'");
            }
        } finally {
            fake.server.shutdownNow();
        }
    }

    /**
     * A coordinator whose Health names no cluster (older than owners) would
     * settle only legacy names: the coordinator path is refused before
     * anything is prepared, saying to upgrade it; a one-writer transaction
     * (no coordinator) still commits.
     */
    @Test
    void aCoordinatorNamingNoClusterIsRefused() throws Exception {
        FollowTest.RoleFake fake = new FollowTest.RoleFake(true, 0, true, null);
        fake.server = ServerBuilder.forPort(0).addService(fake).build().start();
        try (TandemTransactionManager tm = TandemTransactionManager.create(TandemConfig.coordinator(fake.addr())
                        .withDecideAt(TandemConfig.DecideAt.COORDINATOR).withDecisionTimeout(Duration.ofSeconds(5)));
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = CommitPointTest.writeBoth(tm, pg, maria, id);
            jakarta.transaction.RollbackException e = assertThrows(jakarta.transaction.RollbackException.class, tm::commit);
            assertTrue(e.getMessage().contains("names no cluster") && e.getMessage().contains("nothing was prepared"), e.getMessage());
            assertEquals(List.of(), TestEnv.prepared(g));
            assertEquals(0, fake.commits.get(), "no Commit sent");
            assertTrue(!TestEnv.pgHas(id) && !TestEnv.mariaHas(id));
            String alone = TandemJtaTest.id();
            tm.begin();
            try (Connection b = maria.getConnection()) {
                TandemJtaTest.insert(b, alone);
            }
            tm.commit();
            assertTrue(TestEnv.mariaHas(alone), "one writer: no coordinator, no owner needed");
        } finally {
            fake.server.shutdownNow();
        }
    }

    /**
     * The key met a row, and the row was gone when read back (forgotten or
     * swept meanwhile): unknown, never retried into an 'A' — that 'A' could
     * record abort for a transaction committed everywhere.
     */
    @Test
    void aVanishedRowIsUnknownNeverAbort() throws Exception {
        String g = TandemXid.newGtrid();
        try (Connection c = TestEnv.maria(); Statement st = c.createStatement()) {
            st.execute("INSERT INTO tandem_decision (gtrid, outcome, began_at, participants) VALUES ('" + g + "', 'C', UTC_TIMESTAMP(6), '')");
            String table = DecisionTable.readId(c);
            DecisionTable.betweenKeyAndRead = () -> {
                try (Connection d = TestEnv.maria(); Statement ds = d.createStatement()) {
                    ds.execute("DELETE FROM tandem_decision WHERE gtrid = '" + g + "'");
                } catch (java.sql.SQLException e) {
                    throw new IllegalStateException(e);
                }
            };
            assertThrows(DecisionTable.VanishedException.class, () -> DecisionTable.resolve(c, DecisionTable.Dialect.MARIADB, g, table, Duration.ofSeconds(1)));
            assertEquals("", CommitPointTest.decisionRow(TestEnv.maria(), g), "no 'A' was recorded after the row vanished");
        }
    }

    /**
     * COMMIT PREPARED of a branch the database does not know: "already
     * settled" (XAER_NOTA) from a connection that reaches the RM's own
     * decision table; from one whose table has another id, it says nothing
     * (XAER_RMFAIL: left to the coordinator, the decision row kept).
     */
    @Test
    void notFoundIsBelievedOnlyFromTheRmsOwnTable() throws Exception {
        for (boolean own : new boolean[] {true, false}) {
            try (Connection c = TestEnv.pg()) {
                ResourceManager rm = new ResourceManager("pg", DecisionTable.Dialect.POSTGRES, null);
                rm.tableIdForTest(own ? DecisionTable.readId(c) : "fedcba9876543210fedcba9876543210");
                PostgresBranch b = new PostgresBranch(rm, c, x -> { });
                b.xid = TandemXid.of(TandemXid.newGtrid(), "pg").withCommitPoint("maria", CLUSTER);
                b.state = SqlBranch.State.PREPARED;
                XAException e = assertThrows(XAException.class, () -> b.commit(b.xid, false));
                assertEquals(own ? XAException.XAER_NOTA : XAException.XAER_RMFAIL, e.errorCode, e.getMessage());
            }
        }
        assertNull(DecisionTable.betweenKeyAndRead);
    }
}
