module github.com/sluice-io/sluice/services

go 1.26.8
