package setting

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorNamesTheSettingAndWrapsWhy(t *testing.T) {
	why := errors.New("needs authentication off loopback")
	err := fmt.Errorf("server: %w", Refuse(StandbyListen, "10.0.0.1:7072", why))
	if got, want := err.Error(), "server: standby.listen 10.0.0.1:7072: needs authentication off loopback"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var se *Error
	if !errors.As(err, &se) || se.Setting != StandbyListen || !errors.Is(err, why) {
		t.Errorf("errors.As/Is through the wrapping: %v %v", se, errors.Is(err, why))
	}
	if got := Refuse(StandbyTLS, "", why).Error(); got != "standby.tls_cert/tls_key/tls_ca: needs authentication off loopback" {
		t.Errorf("a missing setting: %q", got)
	}
}
