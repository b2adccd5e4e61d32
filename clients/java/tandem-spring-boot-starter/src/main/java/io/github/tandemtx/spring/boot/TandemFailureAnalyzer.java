package io.github.tandemtx.spring.boot;

import org.springframework.boot.diagnostics.FailureAnalysis;
import org.springframework.boot.diagnostics.FailureAnalyzer;

/**
 * Spring Boot's "APPLICATION FAILED TO START" report for the starter's own
 * start-up failures: the reason, and what to change. (The tandem.*
 * properties' validation errors are reported by Boot itself, naming the
 * property, its value and where it was set.)
 */
class TandemFailureAnalyzer implements FailureAnalyzer {
    @Override
    public FailureAnalysis analyze(Throwable failure) {
        for (Throwable t = failure; t != null; t = t.getCause()) {
            if (t instanceof TandemStartupException e) {
                return new FailureAnalysis(e.getMessage(), "Check tandem.coordinators (and tandem.auth-token, tandem.tls.*), that the coordinator "
                        + "runs and serves, and that its --rm names match the data sources' resource managers (tandem.datasources.BEAN.rm, "
                        + "default: the bean's name). To start without this check, set tandem.verify-on-startup=false.", e);
            }
            if (t instanceof InvalidTandemSettingException e) {
                return new FailureAnalysis(e.getMessage(), "Set or change " + e.property() + ".", e);
            }
        }
        return null;
    }
}
