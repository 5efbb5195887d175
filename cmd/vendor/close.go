package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Close shuts the vendor down in order: step down from leading strict tags
// (releasing their leases), stop the service's endpoints and drain its
// connection (every request received is answered), release the worker ID
// (recording its true last millisecond), close the segment store, the
// status page's history sampler, the HTTP server, the data connection, the
// store watch and the embedded server, and unlock the store directory and
// its record. It returns every error on the way.
func (v *vendor) Close(ctx context.Context) error {
	var errs []error
	if v.strict != nil {
		// First, so that the other vendors lead this one's strict tags
		// at once; its requests in flight go to them meanwhile.
		if err := v.strict.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop leading strict tags: %w", err))
		}
	}
	if v.svc != nil {
		if err := v.svc.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the service: %w", err))
		}
	}
	if v.svcConn != nil {
		if err := v.svcConn.Drain(); err != nil {
			errs = append(errs, fmt.Errorf("drain the service's NATS connection: %w", err))
		}
		select {
		case <-v.svcClosed:
			v.log.Info("drained: in-flight requests answered")
		case <-time.After(drainTimeout):
			errs = append(errs, fmt.Errorf("the drain did not finish within %v", drainTimeout))
			v.svcConn.Close()
		}
	}
	if v.leafAPI != nil {
		v.leafAPI.Close(ctx) // its requests are answered before the worker ID goes
	}
	if v.keeper != nil {
		if err := v.keeper.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if v.guard != nil {
		if err := v.guard.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if v.alloc != nil {
		v.alloc.Close(ctx)
	}
	if v.peerMarks != nil {
		v.peerMarks.Close(ctx)
	}
	if v.closeStore != nil {
		v.closeStore()
	}
	if v.history != nil {
		if err := v.history.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop sampling the status page's history: %w", err))
		}
	}
	if v.http != nil {
		if err := v.http.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the HTTP server: %w", err))
		}
	}
	if v.stopClock != nil {
		v.stopClock()
	}
	if v.dataConn != nil {
		v.dataConn.Close()
	}
	return errors.Join(append(errs, v.closeEmbedded())...)
}

// closeEmbedded stops watching the embedded store, stops its server, and
// unlocks its directory and then its record.
func (v *vendor) closeEmbedded() error {
	var errs []error
	if v.watch != nil {
		v.watch.Close()
	}
	if v.srv != nil {
		v.srv.Shutdown()
		v.srv.WaitForShutdown()
		v.log.Info("embedded NATS server stopped")
	}
	if v.lock != nil {
		if err := v.lock.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unlock the store directory: %w", err))
		}
	}
	if v.record != nil {
		if err := v.record.Close(); err != nil {
			errs = append(errs, fmt.Errorf("unlock the record of IDs handed out: %w", err))
		}
	}
	return errors.Join(errs...)
}
