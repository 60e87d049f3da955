// Swagger UI over the API's own schema (served with the app, no third-party script).
// validatorUrl: null, or Swagger UI sends the schema's address to its public validator.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
});
