package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.ForwardingServerCall;
import io.grpc.Metadata;
import io.grpc.ServerBuilder;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerInterceptors;
import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import tandem.v1.Tandem.Branch;
import tandem.v1.Tandem.CommitRequest;
import tandem.v1.Tandem.Outcome;

/**
 * A coordinator whose Health sends tandem-client-settles-any: 1 lets the
 * transaction commit every branch itself after the decision (PostgreSQL's
 * too, as raw 2PC would), so that the reply waits for no phase 2 of the
 * coordinator's. The fakes here settle nothing: a committed PostgreSQL row
 * is the transaction's own COMMIT PREPARED.
 */
class ClientSettlesTest {
    @BeforeAll
    static void tables() throws Exception {
        TestEnv.createTables();
    }

    /** Health's answers carry the header, as the coordinator's do. */
    private static ServerInterceptor allowing() {
        return new ServerInterceptor() {
            @Override
            public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
                return next.startCall(new ForwardingServerCall.SimpleForwardingServerCall<>(call) {
                    @Override
                    public void sendHeaders(Metadata md) {
                        if (call.getMethodDescriptor().getBareMethodName().equals("Health")) {
                            md.put(CoordinatorClient.CLIENT_SETTLES_ANY, "1");
                        }
                        super.sendHeaders(md);
                    }
                }, headers);
            }
        };
    }

    /** A serving fake coordinator whose Health allows client_settles on any RM, answering Commit with commit. */
    private static FollowTest.RoleFake allowingFake(java.util.function.Function<CommitRequest, Object> commit) throws java.io.IOException {
        FollowTest.RoleFake fake = new FollowTest.RoleFake(true, 1, true);
        fake.commit = commit;
        fake.server = ServerBuilder.forPort(0).addService(ServerInterceptors.intercept(fake, allowing())).build().start();
        return fake;
    }

    /** A transaction manager deciding at fake. */
    private static TandemTransactionManager decidingAt(FollowTest.RoleFake fake) {
        return TandemTransactionManager.create(TandemConfig.coordinator(fake.addr())
                .withDecideAt(TandemConfig.DecideAt.COORDINATOR).withDecisionTimeout(Duration.ofSeconds(5)));
    }

    private static Map<String, Boolean> settles(CommitRequest req) {
        Map<String, Boolean> m = new TreeMap<>();
        for (Branch b : req.getBranchesList()) {
            m.put(b.getRm(), b.getClientSettles());
        }
        return m;
    }

    @Test
    void everyBranchIsTheTransactionsWhenTheCoordinatorAllowsIt() throws Exception {
        List<CommitRequest> seen = new CopyOnWriteArrayList<>();
        FollowTest.RoleFake fake = allowingFake(req -> {
            seen.add(req);
            return Outcome.COMMITTED;
        });
        try (TandemTransactionManager tm = decidingAt(fake);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            String id = TandemJtaTest.id();
            String g = CommitPointTest.writeBoth(tm, pg, maria, id);
            tm.commit();
            assertEquals(Map.of("maria", true, "pg", true), settles(seen.get(0)), "the Commit names both branches the transaction's");
            assertTrue(TestEnv.pgHas(id), "the PostgreSQL branch committed by the transaction (the fake coordinator settles nothing)");
            assertTrue(TestEnv.mariaHas(id), "the MariaDB branch committed on its session");
            assertEquals(List.of(), TestEnv.prepared(g), "nothing left prepared");
        } finally {
            fake.server.shutdownNow();
        }
    }

    /**
     * An older coordinator at the same address refuses client_settles on
     * PostgreSQL (INVALID_ARGUMENT, nothing written): the transaction asks
     * again the old way, and so do the next ones.
     */
    @Test
    void aRefusalIsAskedAgainTheOldWay() throws Exception {
        List<CommitRequest> seen = new CopyOnWriteArrayList<>();
        FollowTest.RoleFake fake = allowingFake(req -> {
            seen.add(req);
            if (settles(req).get("pg")) {
                return Status.INVALID_ARGUMENT.withDescription("client_settles is set on the branch on \"pg\": client_settles is only for session-bound branches (mysql)");
            }
            return Outcome.COMMITTED;
        });
        try (TandemTransactionManager tm = decidingAt(fake);
                TandemDataSource pg = TandemDataSource.postgres(tm, "pg", TestEnv.pgSource());
                TandemDataSource maria = TandemDataSource.mariadb(tm, "maria", TestEnv.mariaSource())) {
            for (int i = 0; i < 2; i++) {
                String id = TandemJtaTest.id();
                String g = CommitPointTest.writeBoth(tm, pg, maria, id);
                tm.commit();
                assertTrue(TestEnv.mariaHas(id), "the MariaDB branch committed on its session");
                // The fake coordinator settles nothing: PostgreSQL's branch, now the coordinator's, waits prepared.
                List<String> left = TestEnv.prepared(g);
                assertEquals(1, left.size(), "PostgreSQL's branch left to the coordinator: " + left);
                try (java.sql.Connection c = TestEnv.pg(); java.sql.Statement st = c.createStatement()) {
                    st.execute("ROLLBACK PREPARED '" + left.get(0).substring(3) + "'");
                }
            }
            assertEquals(3, seen.size(), "refused once, asked again the old way, then only the old way: " + seen.size() + " Commits");
            assertEquals(Map.of("maria", true, "pg", true), settles(seen.get(0)));
            assertEquals(Map.of("maria", true, "pg", false), settles(seen.get(1)));
            assertEquals(Map.of("maria", true, "pg", false), settles(seen.get(2)));
        } finally {
            fake.server.shutdownNow();
        }
    }
}
