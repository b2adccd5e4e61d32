package io.github.tandemtx.examples.spring;

import javax.sql.DataSource;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.jdbc.DataSourceBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;

/**
 * Runs transfers through the @Transactional {@link TransferService} and
 * checks the invariants. Tandem's part is tandem-spring-boot-starter's: the
 * application declares its two DataSources (below) and the tandem.*
 * properties (application.properties); the starter makes each DataSource an
 * enlisting TandemDataSource, resource manager "pg" and "maria" (the beans'
 * names), and runs @Transactional on Spring's JtaTransactionManager over
 * Tandem. Arguments are Spring properties:
 * {@code --tandem.coordinators=HOST:PORT} (default $TANDEM_COORDINATOR or
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
    /**
     * PostgreSQL: what Spring Boot makes of a JDBC URL, a HikariCP pool of
     * Hikari's default size (10). The starter wraps it: the bean "pg" is a
     * TandemDataSource of resource manager "pg" over this pool, sized with it.
     */
    @Bean
    DataSource pg(@Value("${example.pg.url}") String url) {
        return DataSourceBuilder.create().url(JdbcUrls.postgres(url)).build();
    }

    /** MariaDB, resource manager "maria", likewise (the URL with allowMultiQueries=true: one round trip less). */
    @Bean
    DataSource maria(@Value("${example.maria.url}") String url) {
        return DataSourceBuilder.create().url(JdbcUrls.mariadb(url)).build();
    }

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
