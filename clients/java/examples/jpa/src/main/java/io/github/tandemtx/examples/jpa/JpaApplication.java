package io.github.tandemtx.examples.jpa;

import com.zaxxer.hikari.HikariDataSource;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import javax.sql.DataSource;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.boot.context.properties.ConfigurationProperties;
import org.springframework.boot.jdbc.DataSourceBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * JPA/Hibernate across two databases on Tandem. The application declares
 * its two DataSources (below) and its persistence units
 * ({@link PersistenceUnits}); tandem-spring-boot-starter makes the
 * DataSources enlisting TandemDataSources (resource managers "pg" and
 * "maria", the beans' names) and runs @Transactional on Spring's
 * JtaTransactionManager over Tandem. Run it with
 * {@code --tandem.coordinators=HOST:PORT}: it opens three wallets, makes
 * payments (one fails on purpose, one would overdraw), prints the balances
 * and payments, and exits 0 when every wallet's debits equal its payments.
 */
@SpringBootApplication
public class JpaApplication {
    /** PostgreSQL's pool (HikariCP; example.pg.hikari.* sets it as Boot would, e.g. maximum-pool-size). */
    @Bean
    @ConfigurationProperties("example.pg.hikari")
    DataSource pg(@Value("${example.pg.url}") String url) {
        return DataSourceBuilder.create().type(HikariDataSource.class).url(JdbcUrls.postgres(url)).build();
    }

    /** MariaDB's pool (the URL with allowMultiQueries=true: one round trip less per XA step). */
    @Bean
    @ConfigurationProperties("example.maria.hikari")
    DataSource maria(@Value("${example.maria.url}") String url) {
        return DataSourceBuilder.create().type(HikariDataSource.class).url(JdbcUrls.mariadb(url)).build();
    }

    public static ConfigurableApplicationContext start(String... args) {
        return new SpringApplicationBuilder(JpaApplication.class).web(WebApplicationType.NONE).run(args);
    }

    /** Empties the example's tables (Hibernate made them), outside any transaction. */
    public static void clear(ConfigurableApplicationContext ctx) {
        new JdbcTemplate(ctx.getBean("pg", DataSource.class)).update("DELETE FROM tandem_jpa_wallet");
        new JdbcTemplate(ctx.getBean("maria", DataSource.class)).update("DELETE FROM tandem_jpa_payment");
    }

    public static void main(String[] args) {
        List<String> problems = new ArrayList<>();
        try (ConfigurableApplicationContext ctx = start(args)) {
            PaymentService s = ctx.getBean(PaymentService.class);
            clear(ctx);
            for (long w = 1; w <= 3; w++) {
                s.open(w, "owner-" + w, 100);
            }
            int committed = 0, failed = 0, refused = 0;
            for (int i = 0; i < 12; i++) {
                long w = i % 3 + 1;
                try {
                    s.pay(UUID.randomUUID().toString(), w, i == 11 ? 1000 : 10, i % 4 == 3);
                    committed++;
                } catch (PaymentService.FailedOnPurpose e) {
                    failed++;
                } catch (PaymentService.InsufficientFunds e) {
                    refused++;
                }
            }
            System.out.printf("payments: %d committed, %d failed on purpose (rolled back on both), %d refused%n", committed, failed, refused);
            for (long w = 1; w <= 3; w++) {
                long balance = s.balance(w), paid = s.totalPaid(w);
                System.out.printf("wallet %d: balance %d (PostgreSQL), payments %d (MariaDB)%n", w, balance, paid);
                if (balance + paid != 100) {
                    problems.add("wallet " + w + ": balance " + balance + " + payments " + paid + " != 100");
                }
            }
        }
        System.out.println(problems.isEmpty() ? "every wallet's debits equal its payments" : "BROKEN: " + problems);
        System.exit(problems.isEmpty() ? 0 : 1);
    }
}
