package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemConfig;
import io.github.tandemtx.jta.TandemTransactionManager;
import io.opentelemetry.api.OpenTelemetry;
import jakarta.transaction.SystemException;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.SmartInitializingSingleton;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.autoconfigure.jdbc.DataSourceTransactionManagerAutoConfiguration;
import org.springframework.boot.autoconfigure.transaction.TransactionAutoConfiguration;
import org.springframework.boot.autoconfigure.transaction.TransactionManagerCustomizers;
import org.springframework.boot.autoconfigure.transaction.jta.JtaAutoConfiguration;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.context.annotation.Bean;
import org.springframework.transaction.TransactionManager;
import org.springframework.transaction.jta.JtaTransactionManager;

/**
 * Tandem for a Spring Boot application, from the tandem.* properties
 * ({@link TandemProperties}) alone:
 *
 * <ul>
 *   <li>the {@link TandemTransactionManager} (closed on shutdown, after the
 *       data sources), unless the application declares one;
 *   <li>Spring's {@link JtaTransactionManager} over it, the
 *       PlatformTransactionManager behind {@code @Transactional}, unless the
 *       application declares a transaction manager of its own;
 *   <li>every DataSource bean of the application made an enlisting
 *       TandemDataSource, sized with its pool
 *       ({@link TandemDataSourcePostProcessor});
 *   <li>unless tandem.verify-on-startup=false, the check once every bean
 *       exists: the coordinator answers, serves, and knows every data
 *       source's resource manager, or the application does not start.
 * </ul>
 *
 * Before Spring Boot's own transaction-manager auto-configuration (JDBC,
 * JPA, JTA), which then backs off. Off with tandem.enabled=false.
 */
@AutoConfiguration(before = {TransactionAutoConfiguration.class, DataSourceTransactionManagerAutoConfiguration.class, JtaAutoConfiguration.class},
        beforeName = "org.springframework.boot.autoconfigure.orm.jpa.HibernateJpaAutoConfiguration")
@ConditionalOnClass(TandemTransactionManager.class)
@ConditionalOnProperty(prefix = "tandem", name = "enabled", havingValue = "true", matchIfMissing = true)
@EnableConfigurationProperties(TandemProperties.class)
public class TandemAutoConfiguration {
    /**
     * The JTA transaction manager, connected to the coordinators lazily (the
     * start-up check makes the first call). Its spans go to the
     * application's OpenTelemetry bean when there is one, else to the global
     * OpenTelemetry once one is installed (README, "Traces").
     */
    @Bean(destroyMethod = "close")
    @ConditionalOnMissingBean
    public TandemTransactionManager tandemTransactionManager(TandemProperties properties, ObjectProvider<OpenTelemetry> openTelemetry) {
        TandemConfig cfg = properties.toConfig();
        OpenTelemetry otel = openTelemetry.getIfUnique();
        return TandemTransactionManager.create(otel != null ? cfg.withOpenTelemetry(otel) : cfg);
    }

    /**
     * Spring's transaction manager for @Transactional over Tandem's
     * UserTransaction, TransactionManager and TransactionSynchronizationRegistry;
     * Boot's spring.transaction.* customizations (default timeout,
     * rollback on commit failure) apply.
     */
    @Bean
    @ConditionalOnMissingBean(TransactionManager.class)
    public JtaTransactionManager transactionManager(TandemTransactionManager tandem, ObjectProvider<TransactionManagerCustomizers> customizers) {
        JtaTransactionManager jta = new JtaTransactionManager(tandem.userTransaction(), tandem);
        jta.setTransactionSynchronizationRegistry(tandem.synchronizationRegistry());
        customizers.ifAvailable(c -> c.customize(jta));
        return jta;
    }

    /** Static: a post-processor is made before the other beans, and needs none of this class's. */
    @Bean
    public static TandemDataSourcePostProcessor tandemDataSourcePostProcessor() {
        return new TandemDataSourcePostProcessor();
    }

    /** The start-up check. */
    @Bean
    @ConditionalOnProperty(prefix = "tandem", name = "verify-on-startup", havingValue = "true", matchIfMissing = true)
    public SmartInitializingSingleton tandemStartupVerifier(TandemTransactionManager tandem) {
        return () -> {
            try {
                tandem.verify();
            } catch (SystemException e) {
                throw new TandemStartupException(e.getMessage(), e);
            }
        };
    }
}
