package org.nexusgrad;

/**
 * Thrown by every NexusGrad call whose nx_status is not NX_OK. The message is the engine's
 * nx_last_error_message() (it names the function, the problem and the values involved).
 */
public class NexusException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final Status status;

  public NexusException(int status, String message) {
    super(message);
    this.status = Status.swigToEnum(status);
  }

  /** The status code, e.g. Status.ERR_SHAPE. */
  public Status status() {
    return status;
  }

  @Override
  public String toString() {
    return "NexusException(" + status + "): " + getMessage();
  }
}
