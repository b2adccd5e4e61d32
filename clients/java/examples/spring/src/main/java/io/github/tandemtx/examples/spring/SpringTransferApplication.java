package io.github.tandemtx.examples.spring;

import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Runs transfers through the @Transactional {@link TransferService} and
 * checks the invariants. Arguments are Spring properties:
 * {@code --tandem.coordinator=HOST:PORT} (default $TANDEM_COORDINATOR or
 * 127.0.0.1:7070), {@code --example.pg.url}, {@code --example.maria.url}
 * (default $TANDEM_PG_DSN, $TANDEM_MYSQL_DSN), {@code --example.transfers=N},
 * {@code --example.threads=N}. Exit status 0 when every invariant holds.
 */
@SpringBootApplication
public class SpringTransferApplication {
    public static void main(String[] args) throws InterruptedException {
        Bank.Report r = run(args);
        System.out.println(r);
        System.exit(r.ok() ? 0 : 1);
    }

    /** Starts the application, runs the transfers, checks, and stops it. */
    public static Bank.Report run(String... args) throws InterruptedException {
        try (ConfigurableApplicationContext ctx = new SpringApplicationBuilder(SpringTransferApplication.class)
                .web(WebApplicationType.NONE).run(args)) {
            var env = ctx.getEnvironment();
            return ctx.getBean(Bank.class).run(env.getProperty("example.transfers", Integer.class, 50), env.getProperty("example.threads", Integer.class, 4));
        }
    }
}
