package io.github.tandemtx.examples.spring;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import jakarta.transaction.SystemException;
import java.sql.SQLException;
import javax.sql.DataSource;
import org.mariadb.jdbc.MariaDbDataSource;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.jdbc.core.JdbcTemplate;
import org.springframework.transaction.jta.JtaTransactionManager;

/**
 * What a Spring user configures to run on Tandem: the transaction manager
 * (connected to the coordinator), Spring's {@link JtaTransactionManager} over
 * it, and one {@link TandemDataSource} per database, named as the
 * coordinator's {@code --rm} names them. Everything else is plain Spring:
 * {@code @Transactional} methods, JdbcTemplate. Spring Boot's own DataSource,
 * JdbcTemplate and transaction manager auto-configuration back off, since
 * these beans exist.
 */
@Configuration(proxyBeanMethods = false)
public class TandemJtaConfiguration {
    /** The JTA transaction manager; its log is the coordinator's, none is kept here. */
    @Bean(destroyMethod = "close")
    TandemTransactionManager tandemTransactionManager(@Value("${tandem.coordinator}") String coordinator) {
        return TandemTransactionManager.create(TandemConfig.coordinator(coordinator));
    }

    /** Spring's transaction manager for @Transactional, over Tandem's UserTransaction and TransactionManager. */
    @Bean
    JtaTransactionManager transactionManager(TandemTransactionManager tandem) {
        JtaTransactionManager jta = new JtaTransactionManager(tandem.userTransaction(), tandem);
        jta.setTransactionSynchronizationRegistry(tandem.synchronizationRegistry());
        return jta;
    }

    /** PostgreSQL, resource manager "pg": connections taken inside a transaction join it. */
    @Bean(destroyMethod = "close")
    TandemDataSource pgDataSource(TandemTransactionManager tandem, @Value("${example.pg.url}") String url) {
        PGSimpleDataSource pg = new PGSimpleDataSource();
        pg.setURL(JdbcUrls.postgres(url));
        return TandemDataSource.postgres(tandem, "pg", pg);
    }

    /** MariaDB, resource manager "maria". */
    @Bean(destroyMethod = "close")
    TandemDataSource mariaDataSource(TandemTransactionManager tandem, @Value("${example.maria.url}") String url) throws SQLException {
        return TandemDataSource.mariadb(tandem, "maria", new MariaDbDataSource(JdbcUrls.mariadb(url)));
    }

    @Bean
    JdbcTemplate pgJdbc(@Qualifier("pgDataSource") DataSource pg) {
        return new JdbcTemplate(pg);
    }

    @Bean
    JdbcTemplate mariaJdbc(@Qualifier("mariaDataSource") DataSource maria) {
        return new JdbcTemplate(maria);
    }

    /**
     * Once every bean exists: the coordinator answers and knows "pg" and
     * "maria", or the application does not start (with the reason), rather
     * than failing at its first two-phase commit.
     */
    @Bean
    SmartInitializingSingleton tandemVerify(TandemTransactionManager tandem) {
        return () -> {
            try {
                tandem.verify();
            } catch (SystemException e) {
                throw new IllegalStateException(e.getMessage(), e);
            }
        };
    }
}
