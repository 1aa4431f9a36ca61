module github.com/sluice-io/sluice/integration

go 1.26.8
