package io.github.tandemtx.examples.jpa;

import io.github.tandemtx.jta.JvmFailpoint;
import io.github.tandemtx.jta.TandemTransaction;
import io.github.tandemtx.jta.TandemTransactionManager;
import java.util.ArrayList;
import java.util.List;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.transaction.PlatformTransactionManager;
import org.springframework.transaction.support.TransactionTemplate;

/**
 * JpaCrashTest's child JVM: the JPA example application (coordinator
 * args[0]) pays 30 from wallet 1 as payment args[1], printing "GTRID
 * &lt;gtrid&gt;" inside the transaction, and never gets past the commit:
 * args[2] "coordinator" decides at the coordinator and halts once the
 * decision is durable, before it settles any branch (the parent kills it
 * too, once the coordinator's Status says COMMITTED), "commit-point" decides at a database
 * commit point and halts right after it (tandem-jta's failpoint).
 */
public final class PayAndDie {
    public static void main(String[] args) throws Exception {
        List<String> props = new ArrayList<>(List.of("--tandem.coordinators=" + args[0], "--logging.level.root=ERROR"));
        switch (args[2]) {
            case "coordinator" -> {
                props.addAll(List.of("--tandem.decide-at=COORDINATOR", "--tandem.decision-timeout=60s"));
                // The transaction commits its branches itself once the
                // decision is durable (PostgreSQL's too): halt before it does.
                JvmFailpoint.haltAt("before-client-settles");
            }
            case "commit-point" -> JvmFailpoint.haltAt("after-commit-point");
            default -> throw new IllegalArgumentException("mode " + args[2]);
        }
        ConfigurableApplicationContext ctx = JpaApplication.start(props.toArray(String[]::new));
        TandemTransactionManager tm = ctx.getBean(TandemTransactionManager.class);
        PaymentService payments = ctx.getBean(PaymentService.class);
        new TransactionTemplate(ctx.getBean(PlatformTransactionManager.class)).executeWithoutResult(st -> {
            System.out.println("GTRID " + ((TandemTransaction) tm.getTransaction()).gtrid());
            System.out.flush();
            payments.pay(args[1], 1, 30, false); // joins this transaction; committed when it ends
        });
        System.out.println("UNEXPECTED: commit returned");
        System.exit(3);
    }
}
