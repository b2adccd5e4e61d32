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
 * With {@code --example.serve=true} the application is a web server: after
 * the transfers it keeps serving Actuator's {@code /actuator/prometheus}
 * (port {@code --server.port}, default 8080), where tandem-jta's metrics
 * are ({@code tandem_client_commits_total}, …), until it is stopped.
 */
@SpringBootApplication
public class SpringTransferApplication {
    public static void main(String[] args) throws InterruptedException {
        if (java.util.Arrays.asList(args).contains("--example.serve=true")) {
            ConfigurableApplicationContext ctx = serve(args);
            var env = ctx.getEnvironment();
            Bank.Report r = ctx.getBean(Bank.class).run(env.getProperty("example.transfers", Integer.class, 50),
                    env.getProperty("example.threads", Integer.class, 4));
            System.out.println(r);
            System.out.println("serving http://127.0.0.1:" + env.getProperty("local.server.port") + "/actuator/prometheus; stop with Ctrl-C");
            return; // the web server's threads keep the JVM up
        }
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

    /**
     * Starts the application as a web server (Actuator's endpoints, among
     * them {@code /actuator/prometheus}) and returns it running; nothing is
     * transferred yet. The caller closes it.
     */
    public static ConfigurableApplicationContext serve(String... args) {
        return new SpringApplicationBuilder(SpringTransferApplication.class).web(WebApplicationType.SERVLET).run(args);
    }
}
