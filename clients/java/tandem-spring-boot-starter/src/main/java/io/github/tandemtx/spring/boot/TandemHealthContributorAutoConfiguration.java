package io.github.tandemtx.spring.boot;

import io.github.tandemtx.jta.TandemDataSource;
import io.github.tandemtx.jta.TandemTransactionManager;
import java.util.Map;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.boot.actuate.autoconfigure.health.ConditionalOnEnabledHealthIndicator;
import org.springframework.boot.actuate.autoconfigure.health.HealthEndpointProperties;
import org.springframework.boot.actuate.endpoint.Show;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.boot.context.properties.EnableConfigurationProperties;
import org.springframework.boot.context.properties.bind.Bindable;
import org.springframework.boot.context.properties.bind.Binder;
import org.springframework.context.annotation.Bean;
import org.springframework.core.env.Environment;

/**
 * The "tandem" health indicator, with Actuator; off with
 * management.health.tandem.enabled=false (it is then in no health group),
 * tuned with management.health.tandem.* ({@link TandemHealthProperties}).
 */
@AutoConfiguration(after = TandemAutoConfiguration.class)
@ConditionalOnClass(name = "org.springframework.boot.actuate.health.HealthIndicator")
@ConditionalOnBean(TandemTransactionManager.class)
@ConditionalOnEnabledHealthIndicator("tandem")
@EnableConfigurationProperties(TandemHealthProperties.class)
public class TandemHealthContributorAutoConfiguration {
    @Bean
    @ConditionalOnMissingBean(name = "tandemHealthIndicator")
    public TandemHealthIndicator tandemHealthIndicator(TandemTransactionManager tandem, ObjectProvider<TandemDataSource> dataSources,
            TandemHealthProperties properties, Environment env) {
        return new TandemHealthIndicator(tandem, dataSources, new Status(properties.unavailableStatusCode()), properties.getTimeout(),
                properties.getCacheTimeToLive(), !detailsShownToAnyone(env));
    }

    /**
     * Whether Spring's health endpoint shows details to anyone, signed in
     * or not: management.endpoint.health.show-details=always, or a health
     * group's show-details=always (management.endpoint.health.group.NAME.*).
     * Then the indicator's details leave out addresses and error texts.
     */
    static boolean detailsShownToAnyone(Environment env) {
        Binder b = Binder.get(env);
        Show endpoint = b.bind("management.endpoint.health.show-details", Show.class).orElse(Show.NEVER);
        if (endpoint == Show.ALWAYS) {
            return true;
        }
        Map<String, HealthEndpointProperties.Group> groups = b.bind("management.endpoint.health.group",
                Bindable.mapOf(String.class, HealthEndpointProperties.Group.class)).orElse(Map.of());
        for (HealthEndpointProperties.Group g : groups.values()) {
            if (g.getShowDetails() == Show.ALWAYS) {
                return true;
            }
        }
        return false;
    }
}
