package io.github.tandemtx.examples.jpa;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.tandemtx.testsupport.TestCoordinator;
import io.github.tandemtx.jta.TandemDataSource;
import java.util.UUID;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * The JPA example against the real databases ($TANDEM_PG_DSN,
 * $TANDEM_MYSQL_DSN) and a real coordinator: a @Transactional method changes
 * an entity of each persistence unit, and both databases commit, or neither.
 */
class JpaPaymentTest {
    static TestCoordinator coord;
    static ConfigurableApplicationContext ctx;
    static PaymentService payments;

    @BeforeAll
    static void start() throws Exception {
        coord = new TestCoordinator();
        ctx = JpaApplication.start("--tandem.coordinators=" + coord.addr);
        JpaApplication.clear(ctx);
        payments = ctx.getBean(PaymentService.class);
    }

    @AfterAll
    static void stop() throws Exception {
        if (ctx != null) {
            ctx.close();
        }
        if (coord != null) {
            coord.close();
        }
    }

    @Test
    void theEntityManagersAreOverTheTandemDataSources() {
        assertTrue(ctx.getBean("pg") instanceof TandemDataSource);
        assertTrue(ctx.getBean("maria") instanceof TandemDataSource);
        assertEquals(2, ctx.getBeansOfType(jakarta.persistence.EntityManagerFactory.class).size());
    }

    @Test
    void aPaymentCommitsOnBothDatabases() {
        payments.open(11, "ada", 100);
        String ref = UUID.randomUUID().toString();
        payments.pay(ref, 11, 30, false);
        assertEquals(70, payments.balance(11), "debited on PostgreSQL");
        assertTrue(payments.recorded(ref), "recorded on MariaDB");
        assertEquals(30, payments.totalPaid(11));
    }

    @Test
    void anExceptionRollsBackBoth() {
        payments.open(12, "bob", 100);
        String ref = UUID.randomUUID().toString();
        assertThrows(PaymentService.FailedOnPurpose.class, () -> payments.pay(ref, 12, 30, true));
        assertEquals(100, payments.balance(12), "the debit rolled back on PostgreSQL");
        assertFalse(payments.recorded(ref), "the payment rolled back on MariaDB");
    }

    /**
     * The second payment with the same reference fails when Hibernate
     * flushes (MariaDB's duplicate key, just before Tandem's commit): the
     * debit on PostgreSQL, flushed in the same transaction, rolls back too.
     */
    @Test
    void aFailureAtTheFlushRollsBackBoth() {
        payments.open(13, "cyd", 100);
        String ref = UUID.randomUUID().toString();
        payments.pay(ref, 13, 10, false);
        RuntimeException e = assertThrows(RuntimeException.class, () -> payments.pay(ref, 13, 25, false));
        StringBuilder chain = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            chain.append(t).append('\n');
        }
        System.out.println("aFailureAtTheFlushRollsBackBoth: " + chain.toString().replace('\n', '|'));
        assertTrue(chain.toString().toLowerCase().contains("duplicate"), chain.toString());
        assertEquals(90, payments.balance(13), "only the first debit stays");
        assertEquals(10, payments.totalPaid(13));
    }

    /** A payment the wallet cannot cover writes nothing on either database. */
    @Test
    void insufficientFundsWriteNothing() {
        payments.open(14, "dee", 20);
        String ref = UUID.randomUUID().toString();
        assertThrows(PaymentService.InsufficientFunds.class, () -> payments.pay(ref, 14, 30, false));
        assertEquals(20, payments.balance(14));
        assertFalse(payments.recorded(ref));
    }
}
