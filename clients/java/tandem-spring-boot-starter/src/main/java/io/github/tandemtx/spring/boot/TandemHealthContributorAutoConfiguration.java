package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.autoconfigure.health.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;

/** The "tandem" health indicator, with Actuator; off with management.health.tandem.enabled=false. */
@AutoConfiguration(after = TandemAutoConfiguration.class)
@ConditionalOnClass(name = "org.springframework.boot.actuate.health.HealthIndicator")
@ConditionalOnBean(TandemTransactionManager.class)
@ConditionalOnEnabledHealthIndicator("tandem")
public class TandemHealthContributorAutoConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "tandemHealthIndicator")
    public TandemHealthIndicator tandemHealthIndicator(TandemTransactionManager tandem, ObjectProvider<TandemDataSource> dataSources) {
        return new TandemHealthIndicator(tandem, dataSources);
    }
}
