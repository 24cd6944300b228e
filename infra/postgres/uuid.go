package postgres

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterUUID teaches m to send and read uuid.UUID as PostgreSQL's binary
// uuid: 16 bytes each way. Without it pgx finds only uuid.UUID's
// driver.Valuer, so every id of a uuid[] parameter (the relay's settle, the
// inbox's receipts) is formatted as text and parsed back, and every id read
// is a string handed to Scan: about 14 times the work of the 16 bytes (a
// uuid[] of 40 ids through pgtype.Map.Encode), and 4 to 5 % of each
// service's CPU in the consumer drain (bench/results/2026-12-04.md, "The consumer's
// limit"). The values sent and read are the same; only the work differs.
// OpenBounded registers it on every connection of its pools (the relay's own
// pool copies that), and a test that opens a connection its own way may call
// it too.
func RegisterUUID(m *pgtype.Map) {
	m.TryWrapEncodePlanFuncs = append([]pgtype.TryWrapEncodePlanFunc{tryWrapUUIDEncode}, m.TryWrapEncodePlanFuncs...)
	m.TryWrapScanPlanFuncs = append([]pgtype.TryWrapScanPlanFunc{tryWrapUUIDScan}, m.TryWrapScanPlanFuncs...)
}

// afterConnect chains RegisterUUID before next (a pool's own hook, if any).
func afterConnect(next func(context.Context, *pgx.Conn) error) func(context.Context, *pgx.Conn) error {
	return func(ctx context.Context, conn *pgx.Conn) error {
		RegisterUUID(conn.TypeMap())
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
}

// pgUUID is uuid.UUID as pgtype's UUID codec reads and writes it.
type pgUUID uuid.UUID

// UUIDValue is never NULL: a uuid.UUID has no NULL (a *uuid.UUID that is nil
// is, through pgx's own pointer plan).
func (u pgUUID) UUIDValue() (pgtype.UUID, error) {
	return pgtype.UUID{Bytes: u, Valid: true}, nil
}

// ScanUUID leaves the target as it is on NULL, as uuid.UUID's Scan(nil) did.
func (u *pgUUID) ScanUUID(v pgtype.UUID) error {
	if v.Valid {
		*u = v.Bytes
	}
	return nil
}

func tryWrapUUIDEncode(value any) (pgtype.WrappedEncodePlanNextSetter, any, bool) {
	if u, ok := value.(uuid.UUID); ok {
		return &uuidEncodePlan{}, pgUUID(u), true
	}
	return nil, nil, false
}

type uuidEncodePlan struct{ next pgtype.EncodePlan }

func (p *uuidEncodePlan) SetNext(next pgtype.EncodePlan) { p.next = next }

func (p *uuidEncodePlan) Encode(value any, buf []byte) ([]byte, error) {
	return p.next.Encode(pgUUID(value.(uuid.UUID)), buf)
}

func tryWrapUUIDScan(target any) (pgtype.WrappedScanPlanNextSetter, any, bool) {
	if u, ok := target.(*uuid.UUID); ok {
		return &uuidScanPlan{}, (*pgUUID)(u), true
	}
	return nil, nil, false
}

type uuidScanPlan struct{ next pgtype.ScanPlan }

func (p *uuidScanPlan) SetNext(next pgtype.ScanPlan) { p.next = next }

func (p *uuidScanPlan) Scan(src []byte, target any) error {
	return p.next.Scan(src, (*pgUUID)(target.(*uuid.UUID)))
}
