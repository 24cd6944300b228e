package db

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
)

func TestMD5UUIDMatchesSQL(t *testing.T) {
	t.Parallel()
	// md5('org' || 0)::uuid in PostgreSQL is the hex digest read as a UUID.
	if got, want := OrgID(0).String(), "c039c6aa-6df7-0353-d7f9-99e97eb6a0a2"; got != want {
		t.Fatalf("OrgID(0) = %s, want %s", got, want)
	}
}

func TestStampSQL(t *testing.T) {
	t.Parallel()
	for table, keys := range stampKeys {
		for i, lite := range []bool{false, true} {
			s := StampSQL(lite, table)
			if !strings.Contains(s, "ON "+table) || !strings.Contains(s, keys[i]) {
				t.Errorf("StampSQL(%t, %s) does not stamp %s by %s:\n%s", lite, table, table, keys[i], s)
			}
		}
		if StampIf(false, true, table) != "" || StampIf(true, true, table) != StampSQL(true, table) {
			t.Errorf("StampIf(%s): a stamp only when asked", table)
		}
	}
	if AnalyzedTable(false, "t") != "" || AnalyzedTable(true, "t") != "t" {
		t.Error("AnalyzedTable: the table only when analyzed")
	}
}

func TestNoRowAs(t *testing.T) {
	t.Parallel()
	other := errors.New("other")
	if !errors.Is(noRowAs(sql.ErrNoRows, sql.ErrNoRows), ErrNoRow) {
		t.Error("a driver's no rows is not ErrNoRow")
	}
	if noRowAs(other, sql.ErrNoRows) != other || noRowAs(nil, sql.ErrNoRows) != nil {
		t.Error("noRowAs changed an error that is not no rows")
	}
}
