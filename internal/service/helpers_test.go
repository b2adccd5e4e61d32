package service

import "os"

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "tandem-service-fuzz") }
