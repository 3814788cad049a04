module github.com/sluice-dev/sluice

go 1.26.0

require github.com/jackc/pgx/v5 v5.13.0

require (
	github.com/dbos-inc/dbos-transact-golang v1.8.0 // indirect
	github.com/dlclark/regexp2/v2 v2.5.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/tiktoken-go/tokenizer v0.10.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/text v0.42.0 // indirect
)
