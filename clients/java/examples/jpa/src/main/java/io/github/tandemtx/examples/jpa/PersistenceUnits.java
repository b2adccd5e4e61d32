package io.github.tandemtx.examples.jpa;

import io.github.tandemtx.examples.jpa.maria.Payment;
import io.github.tandemtx.examples.jpa.pg.Wallet;
import java.util.Map;
import javax.sql.DataSource;
import org.hibernate.cfg.AvailableSettings;
import org.springframework.beans.factory.annotation.Qualifier;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.orm.jpa.hibernate.SpringJtaPlatform;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.data.jpa.repository.config.EnableJpaRepositories;
import org.springframework.orm.jpa.LocalContainerEntityManagerFactoryBean;
import org.springframework.orm.jpa.vendor.HibernateJpaVendorAdapter;
import org.springframework.transaction.jta.JtaTransactionManager;

/**
 * One persistence unit per database, each over its TandemDataSource (the
 * beans "pg" and "maria", which the starter made enlisting): Hibernate in JTA
 * mode (the unit's JTA data source), with Spring Boot's SpringJtaPlatform over
 * the starter's JtaTransactionManager as its JTA platform, so that its
 * sessions join the transaction @Transactional began on Tandem and flush
 * before Tandem's commit. Spring Boot's own JPA auto-configuration backs
 * off: there are two DataSources.
 */
@Configuration(proxyBeanMethods = false)
public class PersistenceUnits {
    /** PostgreSQL: the entities of package ...jpa.pg (Wallet). */
    @Bean
    LocalContainerEntityManagerFactoryBean pgEntityManagerFactory(@Qualifier("pg") DataSource pg, JtaTransactionManager jta,
            @Value("${example.jpa.ddl-auto:update}") String ddl) {
        return unit("pg", pg, Wallet.class.getPackageName(), jta, ddl);
    }

    /** MariaDB: the entities of package ...jpa.maria (Payment). */
    @Bean
    LocalContainerEntityManagerFactoryBean mariaEntityManagerFactory(@Qualifier("maria") DataSource maria, JtaTransactionManager jta,
            @Value("${example.jpa.ddl-auto:update}") String ddl) {
        return unit("maria", maria, Payment.class.getPackageName(), jta, ddl);
    }

    static LocalContainerEntityManagerFactoryBean unit(String name, DataSource ds, String entities, JtaTransactionManager jta, String ddl) {
        LocalContainerEntityManagerFactoryBean f = new LocalContainerEntityManagerFactoryBean();
        f.setPersistenceUnitName(name);
        f.setJtaDataSource(ds); // transaction type JTA: Hibernate takes connections inside the JTA transaction
        f.setPackagesToScan(entities);
        f.setJpaVendorAdapter(new HibernateJpaVendorAdapter());
        f.setJpaPropertyMap(Map.of(
                AvailableSettings.JTA_PLATFORM, new SpringJtaPlatform(jta),
                AvailableSettings.HBM2DDL_AUTO, ddl));
        return f;
    }

    /** Spring Data repositories of the "pg" unit; @Transactional on the starter's "transactionManager". */
    @Configuration(proxyBeanMethods = false)
    @EnableJpaRepositories(basePackageClasses = Wallet.class, entityManagerFactoryRef = "pgEntityManagerFactory")
    static class PgRepositories {
    }

    /** Those of the "maria" unit. */
    @Configuration(proxyBeanMethods = false)
    @EnableJpaRepositories(basePackageClasses = Payment.class, entityManagerFactoryRef = "mariaEntityManagerFactory")
    static class MariaRepositories {
    }
}
