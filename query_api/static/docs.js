// Swagger UI over the API's own schema (served with the app, no third-party script).
window.ui = SwaggerUIBundle({ url: "/openapi.json", dom_id: "#swagger-ui" });
