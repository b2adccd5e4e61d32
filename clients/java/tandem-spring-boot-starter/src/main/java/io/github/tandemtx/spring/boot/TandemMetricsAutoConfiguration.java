package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemTransactionManager;
import io.github.tandemtx.jta.metrics.TandemMetrics;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.context.annotation.Bean;

/**
 * tandem-jta's metrics as a Micrometer MeterBinder bean, with Micrometer:
 * Actuator binds it to its registries, so /actuator/prometheus serves
 * tandem_client_commits_total and the rest (README, "Metrics").
 */
@AutoConfiguration(after = TandemAutoConfiguration.class)
@ConditionalOnClass(name = "io.micrometer.core.instrument.binder.MeterBinder")
@ConditionalOnBean(TandemTransactionManager.class)
public class TandemMetricsAutoConfiguration {
    @Bean
    @ConditionalOnMissingBean
    public TandemMetrics tandemMetrics(TandemTransactionManager tandem) {
        return new TandemMetrics(tandem);
    }
}
