module github.com/fusebox-dev/fusebox/sharedstate/daemonflag

go 1.26.0

require (
	github.com/spf13/pflag v1.0.10
	go.yaml.in/yaml/v3 v3.0.5
)
